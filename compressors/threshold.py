"""Threshold sparsification (Strom 2015, "Scalable Distributed DNN Training Using Commodity GPU
Cloud Computing"): send every value with |x| > tau, with its index.

Strom sends +-tau and keeps the rest in the residual; this variant sends the exact values
(pair it with error feedback for the rest). The number sent depends on the data, so payload
sizes differ between ranks. NaN/Inf always pass (they compare above any tau).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._sparse import (
    SparsifierFeedback,
    check_sparse,
    decode_sparse,
    fill_sparse,
    sparse_layout,
)
from ._util import check_range, numel_of
from .arrays import to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["Threshold"]


@register("threshold")
@dataclass(frozen=True)
class Threshold(SparsifierFeedback, Compressor):
    """Keep values whose magnitude exceeds ``tau``.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("threshold:tau=1")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    tau: float = 1e-3

    def __post_init__(self) -> None:
        check_range(self, "tau", 0.0, 3.0e38)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=True, same_size_on_all_ranks=False,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        return sparse_layout(numel_of(shape), dtype, None)

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        fill_sparse(flat, kernels.select_above(to_f32(flat, dtype), self.tau), bufs)

    def _select_feedback(self, flat: np.ndarray, residual: np.ndarray,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
        return kernels.select_above_feedback(flat, residual, self.tau)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        decode_sparse(payload, out)

    def _check(self, payload: Payload) -> None:
        check_sparse(payload)

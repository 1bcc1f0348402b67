"""Top-k sparsification: send the k = ratio * n largest-magnitude values and their indices.

Exact selection (Aji & Heafield 2017; Stich et al. 2018) runs in O(n): a sample fixes a
threshold that keeps slightly more than k candidates and an exact cut orders only those.
``approximate=True`` is DGC's sampled threshold (Lin et al. 2018, "Deep Gradient
Compression"): everything above a threshold estimated from a seeded random sample is sent,
about k values and never more than 2k, so payload sizes differ between ranks.

NaN/Inf rank above every finite value and are sent exactly (all of them when there are at
most k). Ties go to the lower index; indices are ascending.
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
from .errors import PayloadError
from .payload import Payload

__all__ = ["TopK", "k_of"]


def k_of(numel: int, ratio: float) -> int:
    """Values kept: round(ratio * numel), at least 1 for a non-empty tensor."""
    return 0 if numel == 0 else min(numel, max(1, round(ratio * numel)))


@register("topk")
@dataclass(frozen=True)
class TopK(SparsifierFeedback, Compressor):
    """Keep the largest ``ratio`` fraction of values by magnitude.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("topk:ratio=0.01")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    ratio: float = 0.01
    approximate: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_range(self, "ratio", 0.0, 1.0, lo_open=True)
        if not isinstance(self.approximate, bool):
            raise ValueError(f"TopK: approximate must be a bool, got {self.approximate!r}")

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=True,
                            same_size_on_all_ranks=not self.approximate, needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        return sparse_layout(n, dtype, None if self.approximate else k_of(n, self.ratio))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        k = k_of(flat.size, self.ratio)
        if self.approximate:
            idx = kernels.topk_sampled_indices(x32, k, seed)
        else:
            idx = kernels.topk_indices(x32, k)
        fill_sparse(flat, idx, bufs)

    def _select_feedback(self, flat: np.ndarray, residual: np.ndarray,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
        return kernels.topk_feedback(flat, residual, k_of(flat.size, self.ratio),
                                     self.approximate, seed)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        decode_sparse(payload, out)

    def _check(self, payload: Payload) -> None:
        check_sparse(payload)
        k = k_of(payload.numel, self.ratio)
        if self.approximate and payload.buffers["indices"].size > 2 * k:
            raise PayloadError(f"approximate top-k sends at most {2 * k} values, "
                               f"got {payload.buffers['indices'].size}")

"""QSGD: norm-scaled stochastic quantization (Alistarh et al. 2017, "QSGD: Communication-
Efficient SGD via Gradient Quantization and Encoding").

Per bucket of ``bucket_size`` values: v = |x| / ||x||_2 * s, rounded stochastically to one of
the ``levels`` s + 1 grid points between 0 and s, so E[decode] = x (unbiased). Sends the
float32 bucket norm and one signed code per value (int8 for s <= 127, else int16). NaN/Inf are
excluded from the norm and sent exactly in a side list; zero buckets decode to zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._util import (
    check_bucket,
    check_nonfinite,
    check_range,
    decode_dense,
    nonfinite_layout,
    numel_of,
    split_nonfinite,
)
from .arrays import storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["QSGD"]

F32 = np.dtype(np.float32)


@register("qsgd")
@dataclass(frozen=True)
class QSGD(Compressor):
    """Unbiased stochastic quantization to ``levels`` magnitudes per sign, scaled by the norm.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("qsgd")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    levels: int = 127
    bucket_size: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        check_range(self, "levels", 1, 32767, integer=True)
        check_bucket(self)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(np.int8) if self.levels <= 127 else np.dtype(np.int16)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        lay: Layout = {"codes": (self.code_dtype, n), "norms": (F32, -(-n // self.bucket_size))}
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        bad = kernels.qsgd_encode(x32, bufs["codes"], bufs["norms"], self.bucket_size,
                                  self.levels, seed)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        decode_dense(payload, out, lambda x32: kernels.qsgd_decode(
            b["codes"], b["norms"], x32, self.bucket_size, self.levels))

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)

"""TernGrad: stochastic ternary gradients (Wen et al. 2017, "TernGrad: Ternary Gradients to
Reduce Communication in Distributed Deep Learning").

Per bucket, s = max|x|; each value becomes s * sign(x) * b with b ~ Bernoulli(|x| / s), so
E[decode] = x. Codes {0, +1, -1} take 2 bits (0, 1, 2), four per byte, little-endian.
NaN/Inf are excluded from s and sent exactly in a side list; zero buckets decode to zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._util import (
    check_bucket,
    check_nonfinite,
    nonfinite_layout,
    numel_of,
    restore_nonfinite,
    split_nonfinite,
)
from .arrays import from_f32, storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["TernGrad"]

F32 = np.dtype(np.float32)
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


@register("terngrad")
@dataclass(frozen=True)
class TernGrad(Compressor):
    """Unbiased ternary quantization with a per-bucket max-magnitude scale."""

    bucket_size: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        check_bucket(self)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        lay: Layout = {"codes": (np.dtype(np.uint8), -(-n // 4)),
                       "scales": (F32, -(-n // self.bucket_size))}
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        finite = np.isfinite(x32)
        bad = int(x32.size - np.count_nonzero(finite))
        x = np.where(finite, x32, np.float32(0)) if bad else x32
        nb = bufs["scales"].size
        padded = np.zeros(nb * self.bucket_size, F32)
        padded[:x.size] = np.abs(x)
        s = padded.reshape(nb, self.bucket_size).max(axis=1, initial=np.float32(0))
        bufs["scales"][...] = s
        safe = np.where(s > 0, s, np.float32(1)).repeat(self.bucket_size)[:x.size]
        u = np.random.default_rng(seed).random(x.size, dtype=np.float32)
        keep = u < np.abs(x) / safe
        codes = np.zeros(bufs["codes"].size * 4, np.uint8)
        codes[:x.size] = keep * np.where(np.signbit(x), np.uint8(2), np.uint8(1))
        bufs["codes"][...] = (codes.reshape(-1, 4) << _SHIFTS).sum(axis=1, dtype=np.uint8)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        codes = ((b["codes"][:, None] >> _SHIFTS) & 3).reshape(-1)[:out.size]
        s = b["scales"].repeat(self.bucket_size)[:out.size]
        x32 = np.where(codes == 1, s, np.float32(0)) - np.where(codes == 2, s, np.float32(0))
        from_f32(x32.astype(F32, copy=False), payload.dtype, out)
        restore_nonfinite(payload, out)

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)

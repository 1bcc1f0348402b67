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

from . import kernels
from ._util import (
    check_bucket,
    check_nonfinite,
    decode_dense,
    nonfinite_layout,
    numel_of,
    split_nonfinite,
)
from .arrays import storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["TernGrad"]

F32 = np.dtype(np.float32)


@register("terngrad")
@dataclass(frozen=True)
class TernGrad(Compressor):
    """Unbiased ternary quantization with a per-bucket max-magnitude scale.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("terngrad")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

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
        bad = kernels.terngrad_encode(x32, bufs["codes"], bufs["scales"], self.bucket_size, seed)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        decode_dense(payload, out, lambda x32: kernels.terngrad_decode(
            b["codes"], b["scales"], x32, self.bucket_size))

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)

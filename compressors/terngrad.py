"""TernGrad: stochastic ternary gradients (Wen et al. 2017, "TernGrad: Ternary Gradients to
Reduce Communication in Distributed Deep Learning").

Per bucket, s = max|x|; each value becomes s * sign(x) * b with b ~ Bernoulli(|x| / s), so
E[decode] = x. Codes {0, +1, -1} take 2 bits (0, 1, 2), four per byte, little-endian.
NaN/Inf are excluded from s and sent exactly in a side list; zero buckets decode to zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from .base import register
from .bucketed import U8, Bucketed, Buffers

__all__ = ["TernGrad"]


@register("terngrad")
@dataclass(frozen=True)
class TernGrad(Bucketed):
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

    codes_key = "codes"
    bucket_keys = ("scales",)

    def _codes_layout(self, n: int) -> tuple[np.dtype, int]:
        return U8, -(-n // 4)

    def _quantize(self, x32: np.ndarray, bufs: Buffers, seed: int) -> int:
        return kernels.terngrad_encode(x32, bufs["codes"], bufs["scales"], self.bucket_size,
                                       seed)

    def _dequantize(self, bufs: Buffers, out: np.ndarray) -> None:
        kernels.terngrad_decode(bufs["codes"], bufs["scales"], out, self.bucket_size)

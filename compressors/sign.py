"""Sign compression: one bit per value plus a float32 scale per bucket.

signSGD (Bernstein et al. 2018) sends signs only; EF-signSGD (Karimireddy et al. 2019) and
1-bit Adam (Tang et al. 2021) scale them by the mean magnitude, here per bucket of
``bucket_size`` values, and rely on error feedback for convergence (the estimate is biased).
Zeros count as positive; an all-zero bucket has scale 0 and decodes to zeros. NaN/Inf entries
are left out of the scale and sent exactly in a side list that is empty for finite input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from .base import register
from .bucketed import U8, Bucketed, Buffers

__all__ = ["Sign"]


@register("sign")
@dataclass(frozen=True)
class Sign(Bucketed):
    """1-bit sign with a per-bucket mean-|x| scale.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("sign")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    bucket_size: int = 2048

    codes_key = "bits"
    bucket_keys = ("scales",)
    fuses_feedback = True

    def _codes_layout(self, n: int) -> tuple[np.dtype, int]:
        return U8, -(-n // 8)

    def _quantize(self, x32: np.ndarray, bufs: Buffers, seed: int) -> int:
        return kernels.sign_pack(x32, bufs["bits"], bufs["scales"], self.bucket_size)

    def _quantize_feedback(self, x: np.ndarray, residual: np.ndarray, bufs: Buffers,
                           seed: int) -> int:
        return kernels.sign_pack_feedback(x, residual, residual, bufs["bits"], bufs["scales"],
                                          self.bucket_size)

    def _dequantize(self, bufs: Buffers, out: np.ndarray) -> None:
        kernels.sign_unpack(bufs["bits"], bufs["scales"], out, self.bucket_size)

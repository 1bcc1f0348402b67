"""Bucketed min-max uniform quantization to 1, 2, 4 or 8 bits.

The scheme of CGX (Markov et al. 2022, "CGX: Adaptive System Support for Communication-
Efficient Deep Learning") and ZeRO++'s qwZ/qgZ (Wang et al. 2023): each bucket of
``bucket_size`` values sends its minimum and step as float32 and one ``bits``-wide code per
value; codes are packed little-endian inside each byte. Stochastic rounding (default) rounds
up with probability equal to the fractional part, so the decoded value is unbiased; nearest
rounding halves the worst-case error but is biased.

Zero is exact: at 4 and 8 bits a bucket whose range spans zero gets a grid shifted to hold
zero as one of its points, at one level fewer (14 or 254 steps over the range instead of 15
or 255; a value may then round to a point up to one step past the range). An exact zero, the
gradient of a dead unit or of an embedding row no sample used, is sent as 0, not as rounding
noise that an Adam-type optimizer would divide by a second moment near zero and turn into a
full step; under error feedback its residual stays 0. 1 and 2 bits keep the min-max grid,
where a level is too dear to give up.

Non-finite values: buckets take their min/max over finite values only, the NaN/Inf entries are
coded as 0 and sent exactly in a side list (``nf_idx``, ``nf_val``) that is empty for finite
input. Constant buckets (all-zero included) have step 0 and decode exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import kernels
from .base import Capabilities, register
from .bucketed import U8, Bucketed, Buffers

__all__ = ["Uniform"]


@register("uniform")
@dataclass(frozen=True)
class Uniform(Bucketed):
    """Uniform quantization with per-bucket min and step; bits in {1, 2, 4, 8}.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("uniform:bits=8")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    bits: int = 8
    bucket_size: int = 512
    stochastic: bool = True
    seed: int = 0

    codes_key = "codes"
    bucket_keys = ("mins", "scales")
    fuses_feedback = True
    adds_in_place = True

    def __post_init__(self) -> None:
        if type(self.bits) is not int or self.bits not in (1, 2, 4, 8):
            raise ValueError(f"Uniform: bits must be one of 1, 2, 4, 8, got {self.bits!r}")
        super().__post_init__()
        if not isinstance(self.stochastic, bool):
            raise ValueError(f"Uniform: stochastic must be a bool, got {self.stochastic!r}")

    @property
    def capabilities(self) -> Capabilities:
        """As every bucketed quantizer's; zero is exact at 4 and 8 bits (the shifted grid)."""
        return replace(super().capabilities, exact_zero=self.bits >= 4)

    def _codes_layout(self, n: int) -> tuple[np.dtype, int]:
        return U8, -(-n * self.bits // 8)

    def _quantize(self, x32: np.ndarray, bufs: Buffers, seed: int) -> int:
        return kernels.quantize(x32, bufs["codes"], bufs["mins"], bufs["scales"], self.bits,
                                self.bucket_size, seed, self.stochastic)

    def _dequantize(self, bufs: Buffers, out: np.ndarray) -> None:
        kernels.dequantize(bufs["codes"], bufs["mins"], bufs["scales"], out, self.bits,
                           self.bucket_size)

    def _quantize_feedback(self, x: np.ndarray, residual: np.ndarray, bufs: Buffers,
                           seed: int) -> int:
        return kernels.quantize_feedback(x, residual, residual, bufs["codes"], bufs["mins"],
                                         bufs["scales"], self.bits, self.bucket_size, seed,
                                         self.stochastic)

    def _dequantize_add(self, bufs: Buffers, out: np.ndarray) -> None:
        kernels.dequantize(bufs["codes"], bufs["mins"], bufs["scales"], out, self.bits,
                           self.bucket_size, accumulate=True)

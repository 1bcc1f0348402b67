"""QSGD: norm-scaled stochastic quantization (Alistarh et al. 2017, "QSGD: Communication-
Efficient SGD via Gradient Quantization and Encoding").

Per bucket of ``bucket_size`` values: v = |x| / ||x||_2 * s, rounded stochastically to one of
the ``levels`` s + 1 grid points between 0 and s, so E[decode] = x (unbiased). Sends the
float32 bucket norm and one signed code per value (int8 for s <= 127, else int16). NaN/Inf are
excluded from the norm and sent exactly in a side list; zero buckets decode to zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernels
from ._util import check_range
from .base import register
from .bucketed import Bucketed, Buffers

__all__ = ["QSGD"]


@register("qsgd")
@dataclass(frozen=True)
class QSGD(Bucketed):
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

    codes_key = "codes"
    bucket_keys = ("norms",)

    def __post_init__(self) -> None:
        check_range(self, "levels", 1, 32767, integer=True)
        super().__post_init__()

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(np.int8) if self.levels <= 127 else np.dtype(np.int16)

    def _codes_layout(self, n: int) -> tuple[np.dtype, int]:
        return self.code_dtype, n

    def _quantize(self, x32: np.ndarray, bufs: Buffers, seed: int) -> int:
        return kernels.qsgd_encode(x32, bufs["codes"], bufs["norms"], self.bucket_size,
                                   self.levels, seed)

    def _dequantize(self, bufs: Buffers, out: np.ndarray) -> None:
        kernels.qsgd_decode(bufs["codes"], bufs["norms"], out, self.bucket_size, self.levels)

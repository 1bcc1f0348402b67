"""Half-precision casts: fp16 and bf16 (Micikevicius et al. 2018, "Mixed Precision Training").

Values are rounded to nearest even; NaN stays NaN and Inf stays Inf (values beyond the fp16
range become Inf, as any fp16 cast does). Payloads of different ranks can be summed directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from . import kernels
from ._util import numel_of
from .arrays import from_f32, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["BF16", "FP16"]


class _HalfCast(Compressor):
    wire: ClassVar[str] = "float16"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=True, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        st = np.dtype(np.float16) if self.wire == "float16" else np.dtype(np.uint16)
        return {"values": (st, numel_of(shape))}

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        if dtype == self.wire:
            bufs["values"][...] = flat
        elif self.wire == "float16" and dtype == "float64":
            bufs["values"][...] = flat  # float64 goes straight to fp16: one rounding, not two
        elif self.wire == "float16":
            # the C++ cast (nearest even, NaN kept) is several times faster than numpy's
            kernels.float_to_half(to_f32(flat, dtype), bufs["values"].view(np.uint16), 0)
        else:
            from_f32(to_f32(flat, dtype), "bfloat16", bufs["values"])

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        vals = payload.buffers["values"]
        if payload.dtype == self.wire:
            out[...] = vals
        elif out.dtype == np.float32 and out.flags.c_contiguous:
            kernels.half_to_float(vals.view(np.uint16), out, 0 if self.wire == "float16" else 1)
        else:
            from_f32(to_f32(vals, self.wire), payload.dtype, out)


@register("fp16")
@dataclass(frozen=True)
class FP16(_HalfCast):
    """Cast to IEEE half precision (11-bit significand, range +-65504).

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("fp16")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    wire = "float16"


@register("bf16")
@dataclass(frozen=True)
class BF16(_HalfCast):
    """Cast to bfloat16 (8-bit significand, float32's range).

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("bf16")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    wire = "bfloat16"

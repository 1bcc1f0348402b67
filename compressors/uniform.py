"""Bucketed min-max uniform quantization to 1, 2, 4 or 8 bits.

The scheme of CGX (Markov et al. 2022, "CGX: Adaptive System Support for Communication-
Efficient Deep Learning") and ZeRO++'s qwZ/qgZ (Wang et al. 2023): each bucket of
``bucket_size`` values sends its minimum and step as float32 and one ``bits``-wide code per
value; codes are packed little-endian inside each byte. Stochastic rounding (default) rounds
up with probability equal to the fractional part, so the decoded value is unbiased; nearest
rounding halves the worst-case error but is biased.

Non-finite values: buckets take their min/max over finite values only, the NaN/Inf entries are
coded as 0 and sent exactly in a side list (``nf_idx``, ``nf_val``) that is empty for finite
input. Constant buckets (all-zero included) have step 0 and decode exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._util import (
    NF_IDX,
    check_bucket,
    check_nonfinite,
    decode_dense,
    nonfinite_layout,
    numel_of,
    split_nonfinite,
)
from .arrays import storage_dtype, to_f32, to_host
from .base import Capabilities, Compressor, Layout, derive_seed, register
from .payload import Payload

__all__ = ["Uniform"]

F32 = np.dtype(np.float32)


@register("uniform")
@dataclass(frozen=True)
class Uniform(Compressor):
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

    def __post_init__(self) -> None:
        if type(self.bits) is not int or self.bits not in (1, 2, 4, 8):
            raise ValueError(f"Uniform: bits must be one of 1, 2, 4, 8, got {self.bits!r}")
        check_bucket(self)
        if not isinstance(self.stochastic, bool):
            raise ValueError(f"Uniform: stochastic must be a bool, got {self.stochastic!r}")

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        nb = -(-n // self.bucket_size)
        lay: Layout = {"codes": (np.dtype(np.uint8), -(-n * self.bits // 8)),
                       "mins": (F32, nb), "scales": (F32, nb)}
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        bad = kernels.quantize(x32, bufs["codes"], bufs["mins"], bufs["scales"], self.bits,
                               self.bucket_size, seed, self.stochastic)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        decode_dense(payload, out, lambda x32: kernels.dequantize(
            b["codes"], b["mins"], b["scales"], x32, self.bits, self.bucket_size))

    fuses_feedback = True

    def compress_feedback(self, x: np.ndarray, residual: np.ndarray, *, name: str,
                          step: int = 0) -> Payload | None:
        if not self._feedback_args(x, residual):
            return None
        host, info = to_host(x)
        bufs = self._fixed_buffers(info, None)
        seed = derive_seed(self.seed, name, step)
        flat = host.reshape(-1)
        bad = kernels.quantize_feedback(flat, residual, residual, bufs["codes"], bufs["mins"],
                                        bufs["scales"], self.bits, self.bucket_size, seed,
                                        self.stochastic)
        # The kernel left the non-finite sums in the residual: they go out exactly, in the
        # side list, and the residual keeps 0 there (as ErrorFeedback.update_sent does).
        split_nonfinite(residual, residual, bad, bufs)
        residual[bufs[NF_IDX]] = 0
        return Payload(self.name, info.dtype, info.shape, self.params, bufs, origin=info)

    def decompress_add(self, payload: Payload, out: np.ndarray) -> bool:
        self.check(payload)
        b = payload.buffers
        if payload.dtype != "float32" or out.dtype != F32 or not out.flags.c_contiguous or \
                out.size != payload.numel or b[NF_IDX].size:
            return False
        kernels.dequantize(b["codes"], b["mins"], b["scales"], out.reshape(-1), self.bits,
                           self.bucket_size, accumulate=True)
        return True

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)

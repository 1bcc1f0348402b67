"""The skeleton of the bucketed quantizers (sign, TernGrad, uniform, QSGD).

Each sends one codes buffer plus float32 statistics per bucket of ``bucket_size`` values
(scales, minima or norms), computed over the finite values only; NaN/Inf entries travel
exactly in a side list (``nf_idx``, ``nf_val``) that is empty for finite input. A subclass
states only what differs: the codes buffer's name, dtype and length, the names of its
per-bucket buffers, and the kernel calls that fill and read them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

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
from .base import Capabilities, Compressor, Layout
from .payload import Payload

__all__ = ["F32", "U8", "Bucketed", "Buffers"]

F32 = np.dtype(np.float32)
U8 = np.dtype(np.uint8)
Buffers = dict[str, np.ndarray]


class Bucketed(Compressor):
    """Base class: codes plus float32 per-bucket buffers, through the C++ kernels.

    Subclasses are frozen dataclasses with a ``bucket_size`` field; they set ``codes_key`` and
    ``bucket_keys`` and implement ``_codes_layout``, ``_quantize`` and ``_dequantize`` (and,
    with ``fuses_feedback`` / ``adds_in_place``, ``_quantize_feedback`` / ``_dequantize_add``).

    Example::

        >>> import numpy as np, compressors
        >>> from compressors.bucketed import Bucketed
        >>> comp = compressors.get("terngrad:bucket_size=64")
        >>> assert isinstance(comp, Bucketed) and list(comp.layout((100,), "float32")) == [
        ...     "codes", "scales", "nf_idx", "nf_val"]
    """

    bucket_size: int
    #: Name of the codes buffer.
    codes_key: ClassVar[str] = "codes"
    #: Names of the float32 buffers with one value per bucket, in wire order.
    bucket_keys: ClassVar[tuple[str, ...]] = ("scales",)
    #: Whether ``_dequantize_add`` exists (``decompress_add`` without a temporary).
    adds_in_place: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_bucket(self)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def _codes_layout(self, n: int) -> tuple[np.dtype, int]:
        """dtype and length of the codes buffer for ``n`` values."""
        raise TypeError(f"{type(self).__name__} does not declare its codes")

    def _quantize(self, x32: np.ndarray, bufs: Buffers, seed: int) -> int:
        """Fill the codes and per-bucket buffers from flat float32 x32; the non-finite count."""
        raise TypeError(f"{type(self).__name__} cannot compress")

    def _dequantize(self, bufs: Buffers, out: np.ndarray) -> None:
        """Write the decoded float32 values into flat contiguous ``out``."""
        raise TypeError(f"{type(self).__name__} cannot decompress")

    def _quantize_feedback(self, x: np.ndarray, residual: np.ndarray, bufs: Buffers,
                           seed: int) -> int:
        """``_quantize(x + residual)`` leaving the error in ``residual`` (non-finite sums kept
        there as they are); the non-finite count. Only with ``fuses_feedback``."""
        raise TypeError(f"{type(self).__name__} has no fused error feedback")

    def _dequantize_add(self, bufs: Buffers, out: np.ndarray) -> None:
        """``out +=`` the decoded values. Only with ``adds_in_place``."""
        raise TypeError(f"{type(self).__name__} cannot decode into a sum")

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        nb = -(-n // self.bucket_size)
        lay: Layout = {self.codes_key: self._codes_layout(n)}
        lay.update((key, (F32, nb)) for key in self.bucket_keys)
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: Buffers,
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        bad = self._quantize(x32, bufs, seed)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        decode_dense(payload, out, lambda x32: self._dequantize(payload.buffers, x32))

    def compress_feedback(self, x: np.ndarray, residual: np.ndarray, *, name: str,
                          step: int = 0, rank: int = 0) -> Payload | None:
        if not self.fuses_feedback or not self._feedback_args(x, residual):
            return None
        host, info = to_host(x)
        bufs = self._fixed_buffers(info, None)
        seed = self.draw_seed(name, step, rank)  # as compress(): the same payload
        bad = self._quantize_feedback(host.reshape(-1), residual, bufs, seed)
        # The kernel left the non-finite sums in the residual: they go out exactly, in the
        # side list, and the residual keeps 0 there (as ErrorFeedback.update_sent does).
        split_nonfinite(residual, residual, bad, bufs)
        residual[bufs[NF_IDX]] = 0
        return Payload(self.name, info.dtype, info.shape, self.params, bufs, origin=info)

    def decompress_add(self, payload: Payload, out: np.ndarray) -> bool:
        if not self.adds_in_place:
            return False
        self.check(payload)
        if payload.dtype != "float32" or out.dtype != F32 or not out.flags.c_contiguous or \
                out.size != payload.numel or payload.buffers[NF_IDX].size:
            return False
        self._dequantize_add(payload.buffers, out.reshape(-1))
        return True

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)

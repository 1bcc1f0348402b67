"""Device twins of compressors: compress and decode where the data lives (CUDA memory).

A ``DeviceCodec`` runs one compressor on one device runtime. It compresses a flat float32
device array (with error feedback: the residual stays on the device and is updated in the same
call) into a ``DevicePayload`` whose buffers are device arrays laid out exactly like the host
compressor's payload, so its wire bytes (``header`` + the buffers' bytes + checksum) are the
same bytes a CPU rank would send. It decodes a payload's device buffers into, or adds them to,
a float32 device array. Moving bytes between host and device is the caller's business.

Error feedback's device residuals live in ``compressors.device_feedback``.

Which codec runs a compressor on an array is asked of ``compressors.providers``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ._wire import CHECKSUM_NBYTES, checksum
from .base import Compressor
from .payload import Param, checksum_enabled, header_bytes

__all__ = ["DeviceArray", "DeviceCodec", "DevicePayload", "seal", "wire_nbytes"]


@dataclass(frozen=True)
class DeviceArray:
    """A flat, contiguous run of device memory (pointer arithmetic only; ``owner`` keeps the
    memory alive). It exposes __cuda_array_interface__, so CuPy and torch can wrap it."""

    owner: Any
    ptr: int
    size: int
    dtype: np.dtype
    stream: int | None = None  # the CAI stream the work on it is queued on

    @classmethod
    def of(cls, obj: Any) -> DeviceArray:
        """The flat view of a C-contiguous array exposing __cuda_array_interface__."""
        cai = obj.__cuda_array_interface__
        dt, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != np.empty(shape, dt, order="C").strides:
            raise ValueError(f"device array is not C-contiguous (strides {strides})")
        return cls(obj, int(cai["data"][0]), math.prod(shape), dt, cai.get("stream"))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.size,)

    def reshape(self, *shape: Any) -> DeviceArray:
        """Itself: it is flat already (only -1 or its size are accepted)."""
        want = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        if tuple(want) not in ((-1,), (self.size,)):
            raise ValueError(f"a DeviceArray is flat ({self.size} elements), not {want}")
        return self

    def __getitem__(self, s: slice) -> DeviceArray:
        start, stop, step = s.indices(self.size)
        if step != 1:
            raise ValueError("DeviceArray slices are contiguous (step 1)")
        stop = max(stop, start)
        return DeviceArray(self.owner, self.ptr + start * self.dtype.itemsize, stop - start,
                           self.dtype, self.stream)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.size,), "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}


@dataclass
class DevicePayload:
    """A payload whose buffers are device arrays, in the host compressor's wire order."""

    compressor: str
    dtype: str
    shape: tuple[int, ...]
    params: Mapping[str, Param]
    buffers: dict[str, DeviceArray]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers (the wire adds ``header()`` and a checksum)."""
        return sum(b.nbytes for b in self.buffers.values())

    def header(self) -> bytes:
        """The wire header of these buffers (the same bytes ``Payload.to_bytes`` starts with)."""
        specs = [(k, b.dtype.newbyteorder("<"), b.size) for k, b in self.buffers.items()]
        return header_bytes(self.compressor, self.dtype, self.shape, self.params, specs)


class DeviceCodec(Protocol):
    """One compressor on one device runtime; every array is flat, contiguous device memory."""

    compressor: Compressor

    def empty(self, n: int, dtype: np.dtype, stream: int | None = None) -> DeviceArray:
        """A new, uninitialised device array, for use on ``stream`` (a CAI stream: memory
        pools hand memory freed on one stream to work on that stream safely)."""
        ...

    def zeros(self, n: int) -> DeviceArray:
        """A new float32 device array of zeros (made on the device: nothing crosses)."""
        ...

    def upload(self, host: np.ndarray) -> DeviceArray:
        """A device copy of a host array (residuals loaded from a saved state)."""
        ...

    def download(self, arr: DeviceArray) -> np.ndarray:
        """A host copy of a device array (residuals saved with a state)."""
        ...

    def compress(self, x: DeviceArray, *, name: str, step: int,
                 residual: DeviceArray | None = None, fresh: bool = False,
                 rank: int = 0) -> DevicePayload:
        """The payload of x (plus ``residual``, which becomes what was not sent). ``fresh``:
        the residual was just made (zeros), as a host residual that did not exist yet.
        ``rank`` seeds independent draws as the host's (``Compressor.draw_seed``)."""
        ...

    def payload_nbytes(self, numel: int) -> int | None:
        """Buffer bytes of the payload of ``numel`` finite values."""
        ...

    def decode_into(self, payload: DevicePayload, out: DeviceArray) -> None:
        """out = the decoded payload (float32)."""
        ...

    def decode_add(self, payload: DevicePayload, out: DeviceArray) -> None:
        """out += the decoded payload, with the host path's rounding."""
        ...

    def scale(self, out: DeviceArray, factor: float) -> None:
        """out *= float32(factor)."""
        ...


def wire_nbytes(payload: DevicePayload) -> int:
    """Wire bytes of a device payload: header, buffers and (when enabled) the checksum."""
    return len(payload.header()) + payload.nbytes + (CHECKSUM_NBYTES if checksum_enabled() else 0)


def seal(wire: np.ndarray) -> None:
    """Write the trailing checksum of wire bytes whose header and buffers are in place (a
    device payload staged on the host), when checksums are enabled."""
    if checksum_enabled():
        body = wire.size - CHECKSUM_NBYTES
        wire[body:] = np.frombuffer(struct.pack("<I", checksum(wire[:body])), np.uint8)

"""A "device" array whose memory is host memory, exposing only __cuda_array_interface__.

With ``HostRuntime`` installed as the device runtime, compcoll's staging path (stream sync,
device->host copy, collective, host->device copy) runs for real on a machine without a GPU.
"""

from __future__ import annotations

import ctypes

import numpy as np


class FakeDeviceArray:
    """Only __cuda_array_interface__ (v3, with a stream) is visible to compcoll."""

    def __init__(self, host: np.ndarray, stream: int = 7) -> None:
        self.host = np.ascontiguousarray(host)
        self.stream = stream

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.host.shape, "typestr": self.host.dtype.str,
                "data": (self.host.ctypes.data, False), "version": 3, "strides": None,
                "stream": self.stream}

    @staticmethod
    def __compcoll_empty_like__(other: FakeDeviceArray) -> FakeDeviceArray:
        return FakeDeviceArray(np.empty_like(other.host))


class HostRuntime:
    """Device runtime over host memory, counting what the staging path asked of it."""

    name = "host-fake"

    def __init__(self) -> None:
        self.synced = self.d2h = self.h2d = self.allocs = 0

    def stream_synchronize(self, stream: int | None) -> None:
        self.synced += 1

    def memcpy_d2h(self, dst: np.ndarray, src_ptr: int, nbytes: int) -> None:
        self.d2h += 1
        ctypes.memmove(dst.ctypes.data, src_ptr, nbytes)

    def memcpy_h2d(self, dst_ptr: int, src: np.ndarray, nbytes: int) -> None:
        self.h2d += 1
        ctypes.memmove(dst_ptr, src.ctypes.data, nbytes)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        self.allocs += 1
        return np.empty(nbytes, dtype=np.uint8)

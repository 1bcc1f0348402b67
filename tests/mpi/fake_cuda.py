"""A "device" array whose memory is host memory, exposing only __cuda_array_interface__.

With ``HostRuntime`` installed as the device runtime, compcoll's staging path (stream sync,
device->host copy, collective, host->device copy) runs for real on a machine without a GPU;
it counts the copies and their bytes. ``HostCodec`` (registered by ``fake_provider``) is a
device codec over the same memory that runs the C++ kernels through the host compressor, so
the device routing of the compressed allreduce runs here too.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from compressors import Compressor, Payload
from compressors.device import DeviceArray, DevicePayload


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
        self.d2h_bytes = self.h2d_bytes = 0

    def stream_synchronize(self, stream: int | None) -> None:
        self.synced += 1

    def memcpy_d2h(self, dst: np.ndarray, src_ptr: int, nbytes: int) -> None:
        self.d2h += 1
        self.d2h_bytes += nbytes
        ctypes.memmove(dst.ctypes.data, src_ptr, nbytes)

    def memcpy_h2d(self, dst_ptr: int, src: np.ndarray, nbytes: int) -> None:
        self.h2d += 1
        self.h2d_bytes += nbytes
        ctypes.memmove(dst_ptr, src.ctypes.data, nbytes)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        self.allocs += 1
        return np.empty(nbytes, dtype=np.uint8)


def host_view(a: DeviceArray) -> np.ndarray:
    """The numpy array over a fake device array's memory."""
    if a.nbytes == 0:
        return np.empty(0, a.dtype)
    raw = (ctypes.c_uint8 * a.nbytes).from_address(a.ptr)
    return np.frombuffer(raw, np.uint8).view(a.dtype)


class HostCodec:
    """A DeviceCodec on host memory: the host compressor's own path (fused kernel for
    uniform's feedback, compensate/compress/decode/update for sign's), on the memory behind
    the pointers. It counts what it was asked to do."""

    def __init__(self, compressor: Compressor) -> None:
        self.compressor = compressor
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def _own(self, a: np.ndarray) -> DeviceArray:
        a = np.ascontiguousarray(a).reshape(-1)
        return DeviceArray(a, a.ctypes.data, a.size, a.dtype)

    def empty(self, n: int, dtype: np.dtype, stream: int | None = None) -> DeviceArray:
        return self._own(np.empty(n, dtype))

    def zeros(self, n: int) -> DeviceArray:
        return self._own(np.zeros(n, np.float32))

    def upload(self, host: np.ndarray) -> DeviceArray:
        self._count("upload")
        return self._own(host.copy())

    def download(self, arr: DeviceArray) -> np.ndarray:
        return host_view(arr).copy()

    def payload_nbytes(self, numel: int) -> int | None:
        return self.compressor.payload_nbytes(numel)

    def compress(self, x: DeviceArray, *, name: str, step: int,
                 residual: DeviceArray | None = None, fresh: bool = False,
                 rank: int = 0) -> DevicePayload:
        self._count("compress")
        comp, xv = self.compressor, host_view(x)
        if residual is None:
            payload = comp.compress(xv, name=name, step=step, rank=rank)
        elif comp.fuses_feedback:
            payload = comp.compress_feedback(xv, host_view(residual), name=name, step=step,
                                             rank=rank)
        else:
            res = host_view(residual)
            c = xv if fresh else xv + res
            payload = comp.compress(c, name=name, step=step, rank=rank)
            sent = comp.decompress(payload)
            with np.errstate(invalid="ignore", over="ignore"):
                np.subtract(c, sent, out=res)
            res[~np.isfinite(res)] = 0
        return DevicePayload(payload.compressor, payload.dtype, payload.shape, payload.params,
                             {k: self._own(b.copy()) for k, b in payload.buffers.items()})

    def _payload(self, p: DevicePayload) -> Payload:
        return Payload(p.compressor, p.dtype, p.shape, p.params,
                       {k: host_view(b) for k, b in p.buffers.items()})

    def decode_into(self, payload: DevicePayload, out: DeviceArray) -> None:
        self._count("decode")
        self.compressor.decompress(self._payload(payload), out=host_view(out))

    def decode_add(self, payload: DevicePayload, out: DeviceArray) -> None:
        self._count("decode")
        o, p = host_view(out), self._payload(payload)
        if not self.compressor.decompress_add(p, o):
            o += self.compressor.decompress(p, out=np.empty_like(o))

    def scale(self, out: DeviceArray, factor: float) -> None:
        o = host_view(out)
        o *= np.float32(factor)


#: The compressors HostCodec stands in for (the real CuPy codec's list).
TWINS = ("uniform", "sign", "topk")
codecs: list[HostCodec] = []  # every codec fake_provider handed out, newest last


def fake_provider(compressor: Compressor, array: Any) -> HostCodec | None:
    """A HostCodec for uniform (8, 4, 2 bits), sign and exact top-k on FakeDeviceArray, else
    None."""
    if not isinstance(array, FakeDeviceArray) or compressor.name not in TWINS or \
            getattr(compressor, "bits", 8) not in (2, 4, 8) or \
            getattr(compressor, "approximate", False):
        return None
    codecs.append(HostCodec(compressor))
    return codecs[-1]

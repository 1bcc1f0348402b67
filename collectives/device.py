"""Device (CUDA) buffers: stream synchronization, pinned host staging, CUDA-aware MPI detection.

compcoll's own algorithms reduce on the host with the C++ kernels, so a device buffer is
staged through pinned host memory: synchronize the producing stream, copy device->host, run
the collective, copy host->device. A compressed allreduce whose compressor has a device twin
stages only the payloads (``collectives.compressed.ondevice``). The ``mpi`` algorithm hands
device buffers straight to the MPI library when that library is CUDA-aware
(MPIX_Query_cuda_support, or COMPCOLL_CUDA_AWARE_MPI=1 to force it).

The runtime doing the copies is found lazily: CuPy, then torch.cuda, then libcudart through
ctypes. Tests register a runtime whose "device" memory is host memory, which exercises every
step of this path on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Protocol

import numpy as np


class DeviceRuntime(Protocol):
    """The few CUDA runtime calls staging needs."""

    name: str

    def stream_synchronize(self, stream: int | None) -> None: ...
    def memcpy_d2h(self, dst: np.ndarray, src_ptr: int, nbytes: int) -> None: ...
    def memcpy_h2d(self, dst_ptr: int, src: np.ndarray, nbytes: int) -> None: ...
    def pinned_empty(self, nbytes: int) -> np.ndarray: ...


class CudartRuntime:
    """libcudart through ctypes: works with any array exposing __cuda_array_interface__."""

    name = "cudart"
    _D2H, _H2D = 2, 1

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self._pinned: list[tuple[int, np.ndarray]] = []

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    def stream_synchronize(self, stream: int | None) -> None:
        # CAI v3: None means no synchronization needed; 1/2 are the legacy/per-thread defaults.
        if stream is None:
            return
        rc = self.lib.cudaStreamSynchronize(ctypes.c_void_p(stream))
        self._check(rc, "cudaStreamSynchronize")

    def memcpy_d2h(self, dst: np.ndarray, src_ptr: int, nbytes: int) -> None:
        rc = self.lib.cudaMemcpy(ctypes.c_void_p(dst.ctypes.data), ctypes.c_void_p(src_ptr),
                                 ctypes.c_size_t(nbytes), self._D2H)
        self._check(rc, "cudaMemcpy device->host")

    def memcpy_h2d(self, dst_ptr: int, src: np.ndarray, nbytes: int) -> None:
        rc = self.lib.cudaMemcpy(ctypes.c_void_p(dst_ptr), ctypes.c_void_p(src.ctypes.data),
                                 ctypes.c_size_t(nbytes), self._H2D)
        self._check(rc, "cudaMemcpy host->device")

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        ptr = ctypes.c_void_p()
        self._check(self.lib.cudaMallocHost(ctypes.byref(ptr), ctypes.c_size_t(max(nbytes, 1))),
                    "cudaMallocHost")
        buf = (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr.value)
        arr = np.frombuffer(buf, dtype=np.uint8)[:nbytes]
        self._pinned.append((ptr.value, arr))  # freed at exit with the process
        return arr


_runtime: DeviceRuntime | None = None
_free_pinned: list[np.ndarray] = []  # staging buffers not in use, reused before allocating


def set_runtime(runtime: DeviceRuntime | None) -> None:
    """Install the runtime used for device buffers (tests install a host-memory fake)."""
    global _runtime
    _runtime = runtime
    _free_pinned.clear()


def runtime() -> DeviceRuntime:
    """The active device runtime, found on first use."""
    global _runtime
    if _runtime is None:
        for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13", "libcudart.so.11.0",
                     ctypes.util.find_library("cudart")):
            if not name:
                continue
            try:
                _runtime = CudartRuntime(ctypes.CDLL(name))
                break
            except OSError:
                continue
        else:
            raise RuntimeError(
                "got a CUDA buffer but no CUDA runtime (libcudart) could be loaded; install the "
                "CUDA runtime (e.g. pip install nvidia-cuda-runtime-cu12) or pass host buffers"
            )
    return _runtime


def acquire_pinned(nbytes: int) -> np.ndarray:
    """A pinned host buffer of at least ``nbytes``: the smallest free one that fits, else a
    new one (pinned allocation is slow, so buffers are kept for reuse; one per collective in
    flight). Give it back with ``release_pinned``."""
    fits = [i for i, b in enumerate(_free_pinned) if b.nbytes >= nbytes]
    if fits:
        return _free_pinned.pop(min(fits, key=lambda i: _free_pinned[i].nbytes))
    return runtime().pinned_empty(max(nbytes, 1 << 16))


def release_pinned(buf: np.ndarray) -> None:
    """Return a buffer from ``acquire_pinned`` to the pool."""
    _free_pinned.append(buf)


def mpi_is_cuda_aware() -> bool:
    """True if the MPI library can take device pointers (MPIX_Query_cuda_support)."""
    forced = os.environ.get("COMPCOLL_CUDA_AWARE_MPI")
    if forced is not None and forced != "":
        return forced.lower() in ("1", "true", "yes", "on")
    try:
        from mpi4py import MPI

        lib = ctypes.CDLL(MPI.__file__, mode=ctypes.RTLD_GLOBAL)
        query = getattr(lib, "MPIX_Query_cuda_support", None)
        if query is None:
            query = getattr(ctypes.CDLL(None), "MPIX_Query_cuda_support", None)
        return bool(query()) if query is not None else False
    except (OSError, AttributeError):
        return False

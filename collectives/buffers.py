"""Caller buffers in, caller buffers out: numpy, torch (CPU/CUDA), CuPy, __cuda_array_interface__.

``prepare(buf, out)`` returns a ``Prepared`` whose ``work`` is a 1-D C-contiguous host numpy
array holding the input; a collective runs in place on ``work`` and ``finish()`` delivers the
result in the caller's type and device. Host buffers are used zero-copy when possible (in place
on a contiguous buffer no byte is copied; an array of the other byte order is reduced from a
native copy, the result written back in its order); device buffers are staged through pinned
host memory after their stream is synchronized (see ``collectives.device``). What each kind
of array is, and how its elements are viewed as numpy (bfloat16 as uint16 bit patterns), is
the adapter layer's, ``compressors.arrays``; this module decides where a collective's input
and result live.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from compressors.arrays import (
    cai_contiguous,
    cuda_interface,
    device_empty_like,
    is_cupy,
    is_torch,
    torch_from_raw,
    torch_raw,
)
from compressors.dtypes import DType, from_numpy, lookup

from . import device, resultpool


@dataclass
class Prepared:
    """The host working array of a collective and how to hand the result back."""

    work: np.ndarray
    dtype: DType
    finish: Callable[[], Any]
    kind: str  # "numpy", "torch", "torch-cuda", "cuda-array"
    #: the caller's input (flat, raw dtype) when ``prepare(..., copy_input=False)`` left it
    #: where it is: ``work`` is then the output buffer, uninitialised
    source: np.ndarray | None = None

    def load(self) -> None:
        """Copy the input into ``work`` if it was left in ``source``."""
        if self.source is not None:
            np.copyto(self.work, self.source)
            self.source = None


def _torch_raw(t: Any) -> np.ndarray:
    """Zero-copy flat numpy view of a contiguous CPU tensor's elements (bf16 as uint16 bits)."""
    return torch_raw(t.reshape(-1))


def _numpy_raw(a: np.ndarray, dtype: DType) -> np.ndarray:
    return a.reshape(-1).view(dtype.raw)


def _leave_or_copy(work: np.ndarray, src: np.ndarray, copy_input: bool) -> np.ndarray | None:
    """Copy the input into work, or hand it back to be read where it is (never when the two
    overlap: the collective writes work while it reads its input)."""
    if copy_input or np.shares_memory(work, src):
        np.copyto(work, src)
        return None
    return src


def _prepare_numpy(buf: np.ndarray, out: Any, copy_input: bool) -> Prepared:
    dtype = from_numpy(buf.dtype)
    if out is not None:
        _check_out(buf, out, np.ndarray)
    inplace = out is buf
    target = resultpool.empty_like_numpy(buf) if out is None else out
    if target.flags.c_contiguous and buf.dtype.isnative:
        work = _numpy_raw(target, dtype)
        source = None if inplace else _leave_or_copy(
            work, _numpy_raw(np.ascontiguousarray(buf), dtype), copy_input)
        return Prepared(work, dtype, lambda: target, "numpy", source)
    # One copy, never aliasing buf; in native byte order (the kernels and MPI add native
    # numbers), converted back to the caller's order when the result is written.
    native = buf.dtype.newbyteorder("=")
    work = _numpy_raw(np.array(buf, dtype=native, order="C"), dtype)

    def finish() -> np.ndarray:
        np.copyto(target, work.view(native).reshape(target.shape))
        return target

    return Prepared(work, dtype, finish, "numpy")


def _prepare_torch_cpu(buf: Any, out: Any, copy_input: bool) -> Prepared:
    import torch

    dtype = lookup(str(buf.dtype))
    if out is not None:
        _check_out(buf, out, torch.Tensor)
    inplace = out is buf
    target = resultpool.empty_like_torch(buf) if out is None else out
    if target.is_contiguous():
        work = _torch_raw(target)
        source = None if inplace else _leave_or_copy(work, _torch_raw(buf.contiguous()),
                                                     copy_input)
        return Prepared(work, dtype, lambda: target, "torch", source)
    staged = buf.detach().clone(memory_format=torch.contiguous_format)  # never aliases buf
    work = _torch_raw(staged)

    def finish() -> Any:
        with torch.no_grad():
            target.copy_(staged.view(target.shape))
        return target

    return Prepared(work, dtype, finish, "torch")


def _prepare_torch_cuda(buf: Any, out: Any) -> Prepared:
    import torch

    dtype = lookup(str(buf.dtype))
    if out is not None:
        _check_out(buf, out, torch.Tensor)
    target = torch.empty_like(buf) if out is None else out
    # .copy_ to a pinned host tensor orders after the producing stream and blocks until done.
    host = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
    host.copy_(buf.detach())
    work = _torch_raw(host)

    def finish() -> Any:
        with torch.no_grad():
            target.copy_(host.view(target.shape))
        torch.cuda.current_stream(target.device).synchronize()
        return target

    return Prepared(work, dtype, finish, "torch-cuda")


def _cai_layout(obj: Any, role: str) -> tuple[int, int, np.dtype, tuple]:
    cai = cuda_interface(obj)
    shape = tuple(cai["shape"])
    dt = np.dtype(cai["typestr"])
    if not cai_contiguous(cai):
        raise ValueError(
            f"{role} device array is not C-contiguous (strides {cai['strides']}); pass a "
            "contiguous copy (cupy.ascontiguousarray / tensor.contiguous())"
        )
    if not dt.isnative:
        raise ValueError(f"{role} device array has non-native byte order ({dt.str}); pass it "
                         "in native order (e.g. .astype(dtype.newbyteorder('=')))")
    ptr = int(cai["data"][0])
    return ptr, int(np.prod(shape, dtype=np.int64)) * dt.itemsize, dt, shape


def _prepare_cuda_array(buf: Any, out: Any) -> Prepared:
    """Any object exposing only __cuda_array_interface__ (CuPy arrays and friends)."""
    rt = device.runtime()
    ptr, nbytes, dt, shape = _cai_layout(buf, "input")
    dtype = from_numpy(dt)
    if out is None:
        out = device_empty_like(buf)
    optr, onbytes, odt, _ = _cai_layout(out, "out")
    if onbytes != nbytes or odt != dt:
        raise ValueError(f"out holds {onbytes} bytes of {odt}, input {nbytes} bytes of {dt}")
    rt.stream_synchronize(cuda_interface(buf).get("stream"))
    pinned = device.acquire_pinned(nbytes)
    host = pinned[:nbytes]
    rt.memcpy_d2h(host, ptr, nbytes)
    work = host.view(dtype.raw)

    def finish() -> Any:
        rt.stream_synchronize(cuda_interface(out).get("stream"))
        rt.memcpy_h2d(optr, host, nbytes)
        device.release_pinned(pinned)
        return out

    return Prepared(work, dtype, finish, "cuda-array")


def shape_of(buf: Any) -> tuple[int, ...]:
    """The caller's shape: ``.shape``, or the __cuda_array_interface__'s for bare device arrays."""
    shape = getattr(buf, "shape", None)
    if shape is None:
        cai = cuda_interface(buf)
        shape = cai["shape"] if cai is not None else np.shape(buf)
    return tuple(int(d) for d in shape)


def _check_out(buf: Any, out: Any, kind: type) -> None:
    if not isinstance(out, kind):
        raise TypeError(f"out must be a {kind.__name__} like the input, got {type(out).__name__}")
    if tuple(out.shape) != tuple(buf.shape) or out.dtype != buf.dtype:
        raise ValueError(
            f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the input has shape "
            f"{tuple(buf.shape)} and dtype {buf.dtype}"
        )
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        what = "the input (in place)" if out is buf else "out"
        raise ValueError(f"{what} is read-only and cannot take the result; pass a writable "
                         "out= (or out=None for a new array)")


def prepare(buf: Any, out: Any = None, copy_input: bool = True) -> Prepared:
    """Get a host working copy (or view) of ``buf``; ``out is buf`` means in place.

    ``copy_input=False``: a host input out of place may stay where it is (``source``) for a
    collective that reads all of it before writing ``work``; others are copied as usual."""
    if isinstance(buf, np.ndarray):
        return _prepare_numpy(buf, out, copy_input)
    if is_torch(buf):
        if buf.is_cuda:
            return _prepare_torch_cuda(buf, out)
        return _prepare_torch_cpu(buf, out, copy_input)
    if cuda_interface(buf) is not None:
        return _prepare_cuda_array(buf, out)
    raise TypeError(
        f"unsupported buffer type {type(buf).__name__}: pass a numpy array, a torch tensor, a "
        "CuPy array or an object with __cuda_array_interface__"
    )


def like(buf: Any, host: np.ndarray, dtype: DType) -> Any:
    """A new array of ``buf``'s kind (type and device) holding ``host``'s elements."""
    if isinstance(buf, np.ndarray):
        if not buf.dtype.isnative:  # host holds native numbers: convert to the caller's order
            return host.view(buf.dtype.newbyteorder("=")).astype(buf.dtype)
        return host.view(buf.dtype)
    if is_torch(buf):
        return torch_from_raw(host, dtype.name).to(buf.device)
    if is_cupy(buf):
        import cupy

        return cupy.asarray(host)
    raise TypeError(f"cannot build a {type(buf).__name__} result; pass host arrays")


@dataclass
class Direct:
    """Device buffers handed to a CUDA-aware MPI as they are (no host staging)."""

    send: Any  # None for in place
    recv: Any
    count: int
    dtype: DType
    result: Any


def prepare_direct(buf: Any, out: Any, op: str) -> Direct | None:
    """Device buffers for CUDA-aware MPI_Allreduce, or None where staging must be used.

    Direct applies to contiguous device arrays of MPI-native dtypes (not fp16/bf16, which MPI
    reduces through a host-side user op) and ops other than "avg" (its division would need a
    device kernel). Both streams are synchronized before MPI touches the memory.
    """
    if cuda_interface(buf) is None or op == "avg" or not device.mpi_is_cuda_aware():
        return None
    ptr, nbytes, dt, shape = _cai_layout(buf, "input")
    dtype = from_numpy(dt)
    if dtype.itemsize == 2 and dtype.is_float:
        return None
    inplace = out is buf
    if out is None:
        try:
            out = device_empty_like(buf)
        except TypeError:
            return None  # staging allocates on the host and raises the clear error
    if cuda_interface(out) is None or _cai_layout(out, "out")[1:3] != (nbytes, dt):
        return None
    rt = device.runtime()
    rt.stream_synchronize(cuda_interface(buf).get("stream"))
    if not inplace:
        rt.stream_synchronize(cuda_interface(out).get("stream"))
    return Direct(None if inplace else buf, out, nbytes // dt.itemsize, dtype, out)

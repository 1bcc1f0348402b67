"""CUDA twins of the quantize, sign and sparse kernels, run on CuPy arrays.

The kernels (``csrc/cuda/*.cu``, installed beside this file) are compiled on first use through
``cupy.RawModule`` and give the C++ kernels' results bit for bit: the same codes, minima,
steps and decoded values for the same seed, so a payload made on a GPU decodes on a CPU rank
and the other way round. Every function takes and returns CuPy arrays on the current device.

They compile through NVRTC (what a pip-only CuPy install has; no standard headers needed) and
through nvcc only when NVRTC fails and nvcc is on PATH.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["dequantize", "gather", "module", "quantize", "scatter", "select_above", "sign_pack",
           "sign_unpack", "sources"]

SOURCES = ("quantize.cu", "sign.cu", "sparse.cu", "topk.cu")
# accepted by NVRTC and nvcc alike
OPTIONS = ("-std=c++17",)
# NVRTC ships no standard headers: the sources include <cstdint> only under nvcc, and this
# prelude gives NVRTC the same fixed-width types (the sizes <cstdint> has on every CUDA target)
# and <cmath>'s float infinity.
PRELUDE = """\
#ifdef __CUDACC_RTC__
#ifndef INFINITY
#define INFINITY (__int_as_float(0x7f800000))
#endif
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#endif
"""
_THREADS = 256


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        raise RuntimeError("compressors.cuda runs its kernels through CuPy, which is not "
                           "installed; pip install cupy-cuda12x (or cupy-cuda13x)") from None
    return cupy


def source_dir() -> Path:
    """Where the .cu files are: beside this module in a wheel, csrc/cuda in a source tree."""
    here = Path(__file__).resolve().parent
    for d in (here, here.parents[1] / "csrc" / "cuda"):
        if (d / SOURCES[0]).is_file():
            return d
    raise RuntimeError(f"the CUDA sources ({', '.join(SOURCES)}) are neither in {here} nor in "
                       "the source tree's csrc/cuda; reinstall compcoll")


def sources() -> str:
    """The exact code ``module()`` compiles: the prelude, then the sources."""
    where = source_dir()
    return PRELUDE + "\n".join((where / s).read_text() for s in SOURCES)


@functools.cache
def module() -> Any:
    """The compiled kernels (one cupy.RawModule for all the sources), built through NVRTC,
    or through nvcc when NVRTC fails and nvcc is on PATH."""
    cupy = _cupy()
    code = sources()
    try:
        return _compiled(cupy, code, "nvrtc")
    except Exception as nvrtc_error:  # missing library or a compile error: try nvcc below
        if shutil.which("nvcc") is None:
            raise RuntimeError(
                f"compressors.cuda could not compile its kernels through NVRTC ({nvrtc_error}), "
                "and nvcc is not on PATH to fall back to; install NVRTC (cupy-cuda12x[ctk] or "
                "nvidia-cuda-nvrtc-cu12 from pip, or the CUDA toolkit)") from nvrtc_error
        try:
            return _compiled(cupy, code, "nvcc")
        except Exception as nvcc_error:
            raise RuntimeError(
                f"compressors.cuda could not compile its kernels through NVRTC ({nvrtc_error}) "
                f"nor through nvcc ({nvcc_error})") from nvcc_error


def _compiled(cupy: Any, code: str, backend: str) -> Any:
    mod = cupy.RawModule(code=code, backend=backend, options=OPTIONS)
    # CuPy compiles on the first kernel lookup: do it here, where a failure can fall back
    mod.get_function("compcoll_quantize")
    return mod


def _f32(x: Any, what: str) -> Any:
    cupy = _cupy()
    if not isinstance(x, cupy.ndarray) or x.dtype != cupy.float32 or not x.flags.c_contiguous:
        raise TypeError(f"{what} must be a C-contiguous float32 CuPy array, got "
                        f"{type(x).__name__} {getattr(x, 'dtype', '')}")
    return x.reshape(-1)


def _check(bits: int, bucket_size: int) -> None:
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"bits must be one of 1, 2, 4, 8; got {bits}")
    if bucket_size <= 0 or bucket_size % 8:
        raise ValueError(f"bucket_size must be a positive multiple of 8; got {bucket_size}")


def _sizes(what: str, *specs: tuple[Any, int, Any]) -> None:
    """Each buffer must be a contiguous array of its dtype with exactly the elements the
    kernel reads: the kernels index them from n alone."""
    for i, (a, size, dtype) in enumerate(specs):
        if getattr(a, "dtype", None) != dtype or a.size != size or not a.flags.c_contiguous:
            raise ValueError(f"{what}: buffer {i} must be a contiguous {np.dtype(dtype).name} "
                             f"array of {size} elements, got {getattr(a, 'dtype', type(a))}"
                             f"[{getattr(a, 'size', '?')}]")


def quantize(x: Any, bits: int, bucket_size: int, seed: int,
             stochastic: bool) -> tuple[Any, Any, Any]:
    """Packed codes, per-bucket minima and steps of x (as ``compressors.kernels.quantize``)."""
    _check(bits, bucket_size)
    cupy, flat = _cupy(), _f32(x, "x")
    n = flat.size
    nb = -(-n // bucket_size)
    codes = cupy.zeros(-(-n * bits // 8), cupy.uint8)
    mins, scales = cupy.zeros(nb, cupy.float32), cupy.zeros(nb, cupy.float32)
    if n:
        module().get_function("compcoll_quantize")(
            (nb,), (_THREADS,), (flat, np.int64(n), np.int32(bits), np.int64(bucket_size),
                                 np.uint64(seed), np.int32(bool(stochastic)), codes, mins, scales),
            shared_mem=2 * _THREADS * 4)
    return codes, mins, scales


def dequantize(codes: Any, mins: Any, scales: Any, n: int, bits: int, bucket_size: int) -> Any:
    """n float32 values decoded from ``quantize``'s output."""
    _check(bits, bucket_size)
    cupy = _cupy()
    nb = -(-n // bucket_size)
    _sizes("dequantize", (codes, -(-n * bits // 8), cupy.uint8), (mins, nb, cupy.float32),
           (scales, nb, cupy.float32))
    out = cupy.empty(n, cupy.float32)
    if n:
        module().get_function("compcoll_dequantize")(
            (-(-n // _THREADS),), (_THREADS,), (codes, mins, scales, np.int64(n), np.int32(bits),
                                                np.int64(bucket_size), out))
    return out


def sign_pack(x: Any, bucket_size: int) -> tuple[Any, Any]:
    """Sign bits (bit j of byte i is the sign of x[8i + j]) and per-bucket mean |x|."""
    _check(1, bucket_size)
    cupy, flat = _cupy(), _f32(x, "x")
    n = flat.size
    nb = -(-n // bucket_size)
    bits, scales = cupy.zeros(-(-n // 8), cupy.uint8), cupy.zeros(nb, cupy.float32)
    if n:
        module().get_function("compcoll_sign_pack")(
            (nb,), (_THREADS,), (flat, np.int64(n), np.int64(bucket_size), bits, scales),
            shared_mem=2 * _THREADS * 4)
    return bits, scales


def sign_unpack(bits: Any, scales: Any, n: int, bucket_size: int) -> Any:
    """±scale per value from ``sign_pack``'s output."""
    _check(1, bucket_size)
    cupy = _cupy()
    _sizes("sign_unpack", (bits, -(-n // 8), cupy.uint8),
           (scales, -(-n // bucket_size), cupy.float32))
    out = cupy.empty(n, cupy.float32)
    if n:
        module().get_function("compcoll_sign_unpack")(
            (-(-n // _THREADS),), (_THREADS,), (bits, scales, np.int64(n), np.int64(bucket_size),
                                                out))
    return out


def select_above(x: Any, tau: float) -> Any:
    """Ascending int64 indices i with |x[i]| >= tau (NaN/Inf always among them)."""
    cupy, flat = _cupy(), _f32(x, "x")
    key = np.uint32(np.float32(abs(tau)).view(np.uint32))
    n, cap = flat.size, max(1024, flat.size // 64)
    while True:
        idx, count = cupy.empty(cap, cupy.int64), cupy.zeros(1, cupy.uint64)
        if n:
            module().get_function("compcoll_select_above")(
                (min(1024, -(-n // _THREADS)),), (_THREADS,),
                (flat, np.int64(n), key, np.int64(cap), idx, count))
        k = int(count.get()[0])
        if k <= cap:
            return cupy.sort(idx[:k])
        cap = k  # more candidates than room: run again with room for all of them


def _indices(idx: Any) -> tuple[Any, Any]:
    """idx as int64 on the device, and a zeroed flag the kernel raises on an index outside
    [0, n) (it skips that index instead of touching memory out of bounds)."""
    cupy = _cupy()
    return cupy.ascontiguousarray(idx.reshape(-1), cupy.int64), cupy.zeros(1, cupy.int32)


def _raise_if_flagged(error: Any, n: int, what: str) -> None:
    if int(error.get()[0]):
        raise ValueError(f"{what}: an index is outside [0, {n}); nothing was read or written "
                         "there (a damaged or foreign payload?)")


def gather(x: Any, idx: Any) -> Any:
    """x[idx] for int64 indices; an index outside x raises ValueError."""
    cupy, flat = _cupy(), _f32(x, "x")
    k = int(idx.size)
    out = cupy.empty(k, cupy.float32)
    if k:
        ix, error = _indices(idx)
        module().get_function("compcoll_gather")(
            (-(-k // _THREADS),), (_THREADS,), (flat, np.int64(flat.size), ix, np.int64(k), out,
                                                error))
        _raise_if_flagged(error, flat.size, "gather")
    return out


def scatter(out: Any, idx: Any, vals: Any, accumulate: bool = False) -> None:
    """out[idx] = vals, or += (atomics: summation order not fixed) with ``accumulate``; an
    index outside out raises ValueError (after the valid ones were written)."""
    flat, v = _f32(out, "out"), _f32(vals, "vals")
    k = int(idx.size)
    if v.size != k:
        raise ValueError(f"scatter: {k} indices but {v.size} values")
    if k:
        ix, error = _indices(idx)
        module().get_function("compcoll_scatter")(
            (-(-k // _THREADS),), (_THREADS,),
            (flat, np.int64(flat.size), ix, v, np.int64(k), np.int32(bool(accumulate)), error))
        _raise_if_flagged(error, flat.size, "scatter")

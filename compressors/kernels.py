"""Thin typed wrappers over the C++ kernels in ``_compcoll`` (host memory).

The only module that imports the extension: compressors and collectives reach the kernels
through these functions. The extension loads on the first kernel call, not at import, so
``import compressors`` and ``import collectives`` work before it is built (``compcoll
doctor`` then says what is missing); that first call raises an ImportError that says how to
build it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from . import _openmp  # noqa: F401  (sets OpenMP's wait policy before the runtime loads)

__all__ = ["OPENMP",  # noqa: F822  (defined by the module __getattr__ below)
           "crc32c", "dequantize", "float_to_half", "gather", "half_to_float",
           "load", "merge_dense", "merge_sorted", "qsgd_decode", "qsgd_encode", "quantize",
           "quantize_feedback", "reduce_into", "scale", "scatter", "scatter_dense",
           "select_above", "select_above_feedback", "set_num_threads", "sign_pack",
           "sign_pack_feedback", "sign_unpack", "sum_squares", "terngrad_decode",
           "terngrad_encode", "topk_feedback", "topk_indices", "topk_sampled_indices"]


def load() -> ModuleType:
    """The extension module, imported on first use (an ImportError naming the fix if it is
    not built).

    Example::

        >>> from compressors import kernels
        >>> assert kernels.load().__name__ == "_compcoll"
    """
    global _compcoll
    try:
        module = importlib.import_module("_compcoll")
    except ImportError as exc:
        raise ImportError(
            f"compcoll's C++ extension _compcoll is not built ({exc}); reinstall with "
            "`pip install -e .` (needs a C++17 compiler and CMake) or run scripts/setup.sh"
        ) from exc
    _compcoll = module  # later calls reach the module directly
    return module


class _Unloaded:
    """Stands for the extension until a wrapper first touches it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(load(), name)


_compcoll: Any = _Unloaded()


def __getattr__(name: str) -> bool:
    if name == "OPENMP":  # whether the kernels were built with OpenMP (else one thread each)
        return bool(load().openmp)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def set_num_threads(n: int) -> None:
    """Threads each kernel may use (default 1: MPI runs one rank per core)."""
    _compcoll.set_num_threads(n)


def quantize(x: np.ndarray, codes: np.ndarray, mins: np.ndarray, scales: np.ndarray, bits: int,
             bucket_size: int, seed: int, stochastic: bool) -> int:
    """Bucketed min-max quantization into packed codes; returns the non-finite count."""
    return _compcoll.quantize(x, codes, mins, scales, bits, bucket_size, seed, stochastic)


def quantize_feedback(x: np.ndarray, residual: np.ndarray, residual_out: np.ndarray,
                      codes: np.ndarray, mins: np.ndarray, scales: np.ndarray, bits: int,
                      bucket_size: int, seed: int, stochastic: bool) -> int:
    """``quantize(x + residual)`` and ``residual_out = x + residual - decoded`` in one pass
    (``residual_out`` may be ``residual``). Non-finite sums are copied to ``residual_out`` as
    they are; returns their count."""
    return _compcoll.quantize_feedback(x, residual, residual_out, codes, mins, scales, bits,
                                       bucket_size, seed, stochastic)


def dequantize(codes: np.ndarray, mins: np.ndarray, scales: np.ndarray, out: np.ndarray,
               bits: int, bucket_size: int, accumulate: bool = False) -> None:
    """out = min + code * scale per bucket; ``out +=`` that with ``accumulate``."""
    _compcoll.dequantize(codes, mins, scales, out, bits, bucket_size, accumulate)


def sign_pack(x: np.ndarray, bits: np.ndarray, scales: np.ndarray, bucket_size: int) -> int:
    """Sign bits plus per-bucket mean |x|; returns the non-finite count."""
    return _compcoll.sign_pack(x, bits, scales, bucket_size)


def sign_pack_feedback(x: np.ndarray, residual: np.ndarray, residual_out: np.ndarray,
                       bits: np.ndarray, scales: np.ndarray, bucket_size: int) -> int:
    """``sign_pack(x + residual)`` and ``residual_out = x + residual - decoded`` in one pass
    over each bucket (``residual_out`` may be ``residual``). Non-finite sums are copied to
    ``residual_out`` as they are; returns their count."""
    return _compcoll.sign_pack_feedback(x, residual, residual_out, bits, scales, bucket_size)


def sign_unpack(bits: np.ndarray, scales: np.ndarray, out: np.ndarray, bucket_size: int) -> None:
    _compcoll.sign_unpack(bits, scales, out, bucket_size)


def terngrad_encode(x: np.ndarray, codes: np.ndarray, scales: np.ndarray, bucket_size: int,
                    seed: int) -> int:
    """2-bit ternary codes plus per-bucket max |x|; returns the non-finite count."""
    return _compcoll.terngrad_encode(x, codes, scales, bucket_size, seed)


def terngrad_decode(codes: np.ndarray, scales: np.ndarray, out: np.ndarray,
                    bucket_size: int) -> None:
    _compcoll.terngrad_decode(codes, scales, out, bucket_size)


def qsgd_encode(x: np.ndarray, codes: np.ndarray, norms: np.ndarray, bucket_size: int,
                levels: int, seed: int) -> int:
    """Signed stochastic codes plus per-bucket L2 norms; returns the non-finite count."""
    return _compcoll.qsgd_encode(x, codes, norms, bucket_size, levels, seed)


def qsgd_decode(codes: np.ndarray, norms: np.ndarray, out: np.ndarray, bucket_size: int,
                levels: int) -> None:
    _compcoll.qsgd_decode(codes, norms, out, bucket_size, levels)


def topk_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices of the exact top-k by magnitude (ties to the lower index)."""
    return _compcoll.topk_indices(x, k)


def topk_sampled_indices(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Ascending indices above a threshold estimated from a seeded sample (about k)."""
    return _compcoll.topk_sampled_indices(x, k, seed)


def select_above(x: np.ndarray, tau: float) -> np.ndarray:
    return _compcoll.select_above(x, tau)


def topk_feedback(x: np.ndarray, residual: np.ndarray, k: int, approximate: bool = False,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Error feedback and top-k in one pass: ``residual += x``, then the int32 indices of
    ``topk_indices(residual, k)`` (``topk_sampled_indices(residual, k, seed)`` when
    approximate) and their float32 values; the residual keeps the rest (the selected entries
    and any NaN/Inf become 0). x: float32, residual: flat float32 of x's size, < 2**31."""
    return _compcoll.topk_feedback(x, residual, k, approximate, seed)


def select_above_feedback(x: np.ndarray, residual: np.ndarray,
                          tau: float) -> tuple[np.ndarray, np.ndarray]:
    """``topk_feedback`` for ``select_above(residual, tau)``."""
    return _compcoll.select_above_feedback(x, residual, tau)


def reduce_into(dst: np.ndarray, src: np.ndarray, dtype: int, op: int) -> None:
    """dst = dst (op) src elementwise (dtype and op: the kernels' codes); fp16/bf16 are
    combined in fp32 and rounded once."""
    _compcoll.reduce_into(dst, src, dtype, op)


def scale(x: np.ndarray, dtype: int, factor: float) -> None:
    """x *= factor in place (fp32 arithmetic for fp16/bf16)."""
    _compcoll.scale(x, dtype, factor)


def sum_squares(x: np.ndarray, dtype: int) -> float:
    """Sum of x*x over a contiguous array, accumulated in double."""
    return float(_compcoll.sum_squares(x, dtype))


def float_to_half(src: np.ndarray, dst: np.ndarray, dtype: int) -> None:
    """Round float32 into fp16 (dtype 0) or bf16 (dtype 1) bit patterns, nearest even."""
    _compcoll.float_to_half(src, dst, dtype)


def half_to_float(src: np.ndarray, dst: np.ndarray, dtype: int) -> None:
    """Widen fp16 (dtype 0) or bf16 (dtype 1) bit patterns to float32."""
    _compcoll.half_to_float(src, dst, dtype)


def crc32c(data: np.ndarray, crc: int = 0) -> int:
    """CRC-32C of a uint8 array's bytes, continuing from ``crc``."""
    return int(_compcoll.crc32c(data, crc))


def merge_sorted(ia: np.ndarray, va: np.ndarray, ib: np.ndarray, vb: np.ndarray,
                 io: np.ndarray, vo: np.ndarray) -> int:
    """Union of two ascending sparse sets into (io, vo), values of a shared index summed;
    returns the length of the union."""
    return int(_compcoll.merge_sorted(ia, va, ib, vb, io, vo))


def merge_dense(out: np.ndarray, idx: list[np.ndarray], vals: list[np.ndarray]) -> None:
    """out = the dense form of the union of sorted sets, shared indices summed in list
    order (int64 indices; float32/float64 values of out's dtype)."""
    _compcoll.merge_dense(out, idx, vals)


def _aligned(a: np.ndarray) -> np.ndarray:
    """a itself, or an aligned copy of a view at an odd byte offset (a received message's):
    the kernels refuse misaligned arrays."""
    return a if a.flags.aligned else np.require(a, requirements="CA")


def gather(x: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """out[j] = x[idx[j]]; float32/float64 through the kernel, other dtypes through numpy."""
    x, idx = _aligned(x), _aligned(idx)
    if x.dtype not in (np.float32, np.float64):
        if out is None:
            return x[idx]
        out[...] = x[idx]
        return out
    out = np.empty(idx.size, x.dtype) if out is None else out
    _compcoll.gather(x, idx, out)
    return out


def scatter_dense(out: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """out = 0 except out[idx] = vals (the last of equal indices wins), in one pass over out
    where idx ascends. out: flat."""
    idx, vals = _aligned(idx), _aligned(vals)
    if out.dtype in (np.float32, np.float64) and vals.dtype == out.dtype \
            and out.flags.c_contiguous:
        _compcoll.scatter_dense(out, idx, vals)
    else:
        out.fill(0)
        out[idx] = vals


def scatter(out: np.ndarray, idx: np.ndarray, vals: np.ndarray, accumulate: bool = False) -> None:
    """out[idx] = vals (or += in list order)."""
    idx, vals = _aligned(idx), _aligned(vals)
    if out.dtype in (np.float32, np.float64) and vals.dtype == out.dtype:
        _compcoll.scatter(out, idx, vals, accumulate)
    elif accumulate:
        np.add.at(out, idx, vals)
    else:
        out[idx] = vals

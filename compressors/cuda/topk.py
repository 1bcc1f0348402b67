"""Exact top-k by magnitude on the GPU: one histogram pass, one compaction, a small exact cut.

The same index set as the C++ kernel (``compressors.kernels.topk_indices``): the k largest
magnitude keys (the float's bits without the sign, so NaN and Inf rank above every finite
value), ties broken by the lower index, indices ascending.

1. A 4096-bin histogram of each key's top 12 bits (exponent and 4 mantissa bits:
   ``csrc/cuda/topk.cu``) finds the bin b holding the k-th largest key, and how many keys
   lie at or above it (c; known exactly, so the compaction needs no second try).
2. ``select_above`` collects the c candidates: the values at or above bin b. For a gradient
   and k at 0.1-1% of n, c is a few times k (a bin spans a sixteenth of an octave).
3. Among the candidates (sorted by index), the k-th largest key T comes from a partition;
   every key above T is kept, and of the keys equal to T the lowest-index ones up to k.

Two full reads of x and work on c elements, against the sort or multi-pass radix select of a
general top-k. The steps run through an array module and two kernels passed in, so the same
code runs on CuPy with the CUDA kernels and, in tests, on numpy with host twins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

BINS, SHIFT = 4096, 19  # as COMPCOLL_TOPK_BINS and COMPCOLL_TOPK_SHIFT in topk.cu

__all__ = ["BINS", "SHIFT", "exact_topk", "host_histogram", "host_select_above", "topk"]


def keys_of(xp: Any, v: Any) -> Any:
    """The magnitude keys of float32 values: their bits without the sign, as uint32."""
    return v.view(xp.uint32) & xp.uint32(0x7FFFFFFF)


def exact_topk(xp: Any, x: Any, k: int, histogram: Callable[[Any], Any],
               select_above: Callable[[Any, int, int], Any]) -> Any:
    """Ascending int64 indices of the k largest |x| (ties: lower index) of a flat float32
    array ``x`` of module ``xp``. ``histogram(x)`` gives the BINS counts of ``key >> SHIFT``
    as a host numpy array; ``select_above(x, key, count)`` the ``count`` indices whose key
    is at least ``key``, in any order."""
    n = int(x.size)
    if not 0 <= k:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0 or n == 0:
        return xp.zeros(0, xp.int64)
    if k >= n:
        return xp.arange(n, dtype=xp.int64)
    counts = np.asarray(histogram(x), dtype=np.int64)
    if counts.shape != (BINS,) or int(counts.sum()) != n:
        raise RuntimeError(f"top-k histogram counted {int(counts.sum())} of {n} values")
    at_least = np.cumsum(counts[::-1])[::-1]  # at_least[b]: keys in bins >= b
    b = int(np.nonzero(at_least >= k)[0][-1])  # the highest bin with k keys at or above it
    c = int(at_least[b])
    idx = xp.sort(select_above(x, b << SHIFT, c))
    if int(idx.size) != c:
        raise RuntimeError(f"top-k compaction found {int(idx.size)} candidates, expected {c}")
    keys = keys_of(xp, x[idx])
    t = keys[xp.argpartition(keys, c - k)[c - k]]  # the k-th largest key
    above = keys > t
    tied = keys == t
    room = k - int(above.sum())
    take = above | (tied & (xp.cumsum(tied) <= room))
    return idx[take]


def host_histogram(x: np.ndarray) -> np.ndarray:
    """The histogram kernel's result, on the host (tests and reference)."""
    return np.bincount(keys_of(np, x) >> SHIFT, minlength=BINS)


def host_select_above(x: np.ndarray, key: int, count: int) -> np.ndarray:
    """compcoll_select_above's index set, on the host, shuffled as atomics would leave it."""
    idx = np.nonzero(keys_of(np, x) >= np.uint32(key))[0].astype(np.int64)
    np.random.default_rng(count).shuffle(idx)
    return idx


def topk(x: Any, k: int) -> Any:
    """Exact top-k of a CuPy float32 array: ascending int64 indices on the device."""
    from . import _THREADS, _cupy, _f32, module

    cupy = _cupy()
    flat = _f32(x, "x")

    def histogram(v: Any) -> np.ndarray:
        hist = cupy.zeros(BINS, cupy.uint32)
        blocks = max(1, min(1024, -(-int(v.size) // _THREADS)))
        module().get_function("compcoll_key_histogram")(
            (blocks,), (_THREADS,), (v, np.int64(v.size), hist))
        return hist.get()

    def select(v: Any, key: int, count: int) -> Any:
        idx, found = cupy.empty(max(count, 1), cupy.int64), cupy.zeros(1, cupy.uint64)
        module().get_function("compcoll_select_above")(
            (max(1, min(1024, -(-int(v.size) // _THREADS))),), (_THREADS,),
            (v, np.int64(v.size), np.uint32(key), np.int64(count), idx, found))
        got = int(found.get()[0])
        if got > count:
            raise RuntimeError(f"top-k compaction found {got} candidates, expected {count}")
        return idx[:got]

    return exact_topk(cupy, flat, k, histogram, select)

"""Sparse vectors as (sorted unique int64 indices, values) and their exact merging.

Values are summed in float32 (float64 for float64 input): low-precision inputs accumulate in
fp32. Merges take their inputs in a fixed order, so whoever merges the same sets gets the same
bits; a two-way merge is commutative bit for bit (a + b == b + a).
"""

from __future__ import annotations

import numpy as np

# Wire format of one sparse set: [int64 count][indices as int32 or int64][values].


def coalesce(indices: np.ndarray, values: np.ndarray, size: int,
             acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique indices with duplicates summed; checks every index is in [0, size).
    The result never shares memory with the inputs (copied only where the casts did not)."""
    src_idx, src_val = np.asarray(indices), np.asarray(values)
    idx = src_idx.reshape(-1).astype(np.int64, copy=False)
    val = src_val.reshape(-1).astype(acc, copy=False)
    if idx.size != val.size:
        raise ValueError(f"sparse input has {idx.size} indices but {val.size} values")
    ascending = idx.size < 2 or bool((idx[1:] > idx[:-1]).all())
    if idx.size:
        lo, hi = (idx[0], idx[-1]) if ascending else (idx.min(), idx.max())
        if lo < 0 or hi >= size:
            raise ValueError(f"sparse indices must lie in [0, {size}); got [{lo}, {hi}]")
    if not ascending:
        uniq, inv = np.unique(idx, return_inverse=True)
        summed = np.zeros(uniq.size, dtype=acc)
        np.add.at(summed, inv, val)
        return uniq, summed
    return (idx.copy() if np.may_share_memory(idx, src_idx) else idx,
            val.copy() if np.may_share_memory(val, src_val) else val)


def merge(sets: list[tuple[np.ndarray, np.ndarray]], acc: np.dtype
          ) -> tuple[np.ndarray, np.ndarray]:
    """Union of sorted sparse sets, values of equal indices summed in a fixed order.

    float32/float64: two-way linear merges in list order (((s0 + s1) + s2) ...). Other dtypes:
    a stable sort keeps equal indices in list order and finds the sorted runs the inputs
    already are (O(n log p)); each group of equal indices is then reduced in that order."""
    sets = [s for s in sets if s[0].size]
    if not sets:
        return np.zeros(0, np.int64), np.zeros(0, acc)
    if len(sets) == 1:
        return sets[0][0], sets[0][1].astype(acc, copy=False)
    if np.dtype(acc) in (np.float32, np.float64):  # linear two-way merges, in list order
        from compressors import kernels  # on first use: `import collectives` needs no build

        idx, val = _contiguous(sets[0], acc)
        for other in sets[1:]:
            ib, vb = _contiguous(other, acc)
            io = np.empty(idx.size + ib.size, np.int64)
            vo = np.empty(idx.size + ib.size, acc)
            k = kernels.merge_sorted(idx, val, ib, vb, io, vo)
            idx, val = io[:k], vo[:k]
        return idx, val
    idx = np.concatenate([s[0] for s in sets])
    val = np.concatenate([s[1] for s in sets]).astype(acc, copy=False)
    order = np.argsort(idx, kind="stable")
    idx, val = idx[order], val[order]
    starts = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
    return idx[starts], np.add.reduceat(val, starts)


def to_dense(sets: list[tuple[np.ndarray, np.ndarray]], out: np.ndarray, acc: np.dtype) -> None:
    """out = the dense form of ``merge(sets, acc)``, bit for bit (0 off its indices), written
    in one pass over out without building the merged set (float32/float64 out of dtype acc)."""
    sets = [s for s in sets if s[0].size]
    if out.dtype == np.dtype(acc) and out.dtype in (np.float32, np.float64) and \
            out.flags.c_contiguous and out.ndim == 1:
        from compressors import kernels

        parts = [_contiguous(s, acc) for s in sets]
        kernels.merge_dense(out, [i for i, _ in parts], [v for _, v in parts])
        return
    from compressors import kernels

    idx, val = merge(sets, acc)
    kernels.scatter_dense(out, idx, val.astype(out.dtype, copy=False))


def _contiguous(s: tuple[np.ndarray, np.ndarray], acc: np.dtype
                ) -> tuple[np.ndarray, np.ndarray]:
    return (np.ascontiguousarray(s[0], np.int64),
            np.ascontiguousarray(s[1], acc))


def index_dtype(size: int) -> np.dtype:
    """int32 on the wire when every index fits: 8 bytes per float32 entry instead of 12."""
    return np.dtype(np.int32) if size < 2**31 else np.dtype(np.int64)


def pack(idx: np.ndarray, val: np.ndarray, size: int) -> np.ndarray:
    """One byte buffer: count, indices (narrowed), values; written in place, no temporaries."""
    it, vt = index_dtype(size), np.asarray(val).dtype
    m = idx.size
    buf = np.empty(8 + m * (it.itemsize + vt.itemsize), np.uint8)
    buf[:8].view(np.int64)[0] = m
    np.copyto(buf[8:8 + m * it.itemsize].view(it), idx, casting="unsafe")
    buf[8 + m * it.itemsize:].view(vt)[...] = val
    return buf


def unpack(buf: np.ndarray, size: int, acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of ``pack``; validates the lengths against the count."""
    if buf.size < 8:
        raise ValueError(f"sparse message of {buf.size} bytes is shorter than its header")
    n = int(buf[:8].view(np.int64)[0])
    it = index_dtype(size)
    want = 8 + n * (it.itemsize + np.dtype(acc).itemsize)
    if n < 0 or buf.size != want:
        raise ValueError(f"sparse message of {buf.size} bytes does not hold {n} entries")
    idx = buf[8:8 + n * it.itemsize].view(it).astype(np.int64)
    val = buf[8 + n * it.itemsize:].view(acc)
    if not val.flags.aligned:  # float64 after an odd number of int32 indices
        val = val.copy()
    return idx, val

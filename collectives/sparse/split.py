"""Split-allgather sparse allreduce and its dense-switching variant DSAR (SparCML).

Each rank owns an index range: every rank sends the part of its set that falls in range j to
rank j (alltoallv), the owner merges the p parts in rank order, and the merged ranges are
allgathered. Traffic per rank ~ (own nnz) + (nnz of the union), independent of log p. DSAR
sends a range dense instead once its density passes the break-even point: a sparse entry costs
index + value bytes, a dense one value bytes only, so above val/(idx+val) of the range filled
dense is cheaper (``costmodel.sparse_dense_threshold``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import numpy as np

from ..exchange import allgatherv, alltoallv
from ..transport.base import Request
from .common import Sparse, SparseJob, SparseSteps, even_bounds, split_by_ranges
from .merge import merge, pack, unpack

if TYPE_CHECKING:
    from ..costparams import CostParams


def _owned(job: SparseJob, bounds: np.ndarray) -> SparseSteps:
    """Reduce-scatter by index range: the merged set of this rank's range."""
    parts = split_by_ranges(job.idx, job.val, bounds)
    got = yield from alltoallv(job.comm, job.tag, [pack(i, v, job.size) for i, v in parts])
    return merge([unpack(b, job.size, job.acc) for b in got], job.acc)


#: Bytes of a range message's flag (0 sparse, 1 dense): a whole word, so that what follows
#: stays aligned for the kernels that read it.
_FLAG = 8


def _flagged(flag: int, body: np.ndarray) -> np.ndarray:
    head = np.zeros(_FLAG, np.uint8)
    head[0] = flag
    return np.concatenate([head, body])


def _dense_or_sparse(idx: np.ndarray, val: np.ndarray, lo: int, hi: int, job: SparseJob,
                     allow_dense: bool) -> np.ndarray:
    """Encode a range as flag + sparse set, or flag + dense values."""
    width = hi - lo
    if allow_dense and width and idx.size > job.dense_threshold * width:
        dense = np.zeros(width, job.acc)
        dense[idx - lo] = val
        return _flagged(1, dense.view(np.uint8))
    return _flagged(0, pack(idx, val, job.size))


def _decode_range(buf: np.ndarray, lo: int, hi: int, job: SparseJob
                  ) -> tuple[np.ndarray, np.ndarray]:
    if buf.size < _FLAG or buf[0] not in (0, 1) or buf[1:_FLAG].any():
        raise ValueError("corrupt range message in sparse allgather")
    if buf[0] == 1:
        dense = buf[_FLAG:].view(job.acc)
        if dense.size != hi - lo:
            raise ValueError(f"dense range of {dense.size} values, expected {hi - lo}")
        nz = np.flatnonzero(dense)
        return nz + lo, dense[nz]
    return unpack(buf[_FLAG:], job.size, job.acc)


def _split_allgather_parts(job: SparseJob, allow_dense: bool
                           ) -> Generator[list[Request], None, list[Sparse]]:
    p, r = job.comm.size, job.comm.rank
    bounds = even_bounds(job.size, p)
    idx, val = yield from _owned(job, bounds)
    lo, hi = int(bounds[r]), int(bounds[r + 1])
    msg = _dense_or_sparse(idx, val, lo, hi, job, allow_dense)
    pieces = yield from allgatherv(job.comm, job.tag, msg)
    return [_decode_range(b, int(bounds[j]), int(bounds[j + 1]), job)
            for j, b in enumerate(pieces)]


def _split_allgather(job: SparseJob, allow_dense: bool) -> SparseSteps:
    sets = yield from _split_allgather_parts(job, allow_dense)
    return np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets])


def split_allgather(job: SparseJob) -> SparseSteps:
    return (yield from _split_allgather(job, allow_dense=False))


def dsar(job: SparseJob) -> SparseSteps:
    return (yield from _split_allgather(job, allow_dense=True))


def split_allgather_parts(job: SparseJob) -> Generator[list[Request], None, list[Sparse]]:
    """The result as its p index ranges (disjoint, ascending: their merge is the result)."""
    return (yield from _split_allgather_parts(job, allow_dense=False))


def dsar_parts(job: SparseJob) -> Generator[list[Request], None, list[Sparse]]:
    return (yield from _split_allgather_parts(job, allow_dense=True))


def _price(p: int, k: int, e: int, gather: float, c: CostParams) -> float:
    return 2 * (p - 1) * c.alpha + (p - 1) / p * (k * e + gather) * c.beta


def split_allgather_price(p: int, n: int, k: int, c: CostParams, index_bytes: int,
                          value_bytes: int) -> float:
    """2(p-1) alpha + (p-1)/p (k + U)(I+V) beta, U = min(n, p k) the union at worst."""
    e = index_bytes + value_bytes
    return _price(p, k, e, min(n, p * k) * e, c)


def dsar_price(p: int, n: int, k: int, c: CostParams, index_bytes: int,
               value_bytes: int) -> float:
    """As split-allgather, the allgather at min(U(I+V), nV) bytes (a dense range is cheaper)."""
    e = index_bytes + value_bytes
    return _price(p, k, e, min(min(n, p * k) * e, n * value_bytes), c)

"""The collectives the benchmarks time, one entry each (nccl-tests' per-collective table).

An entry says how to run the collective on rank r's input, the bus-bandwidth factor that
makes busbw comparable with a link's peak for any p (nccl-tests' PERFORMANCE.md), and the
closed-form check of its result for the inputs of ``bench_data`` (rank r holds
``pattern(count, r)``). ``count`` is always the whole vector's element count, as in
nccl-tests' size column: the allreduce's buffer, the reduce-scatter's input, the allgather's
output (rank r contributes block r of its pattern) and the broadcast's buffer (root 0).

    collective      bytes per rank's link       busbw = algbw *
    allreduce       2(p-1)/p n                  2(p-1)/p
    reduce_scatter  (p-1)/p n                   (p-1)/p
    allgather       (p-1)/p n                   (p-1)/p
    broadcast       n                           1
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import collectives
from collectives.algorithms.common import partition
from compressors.dtypes import DType

from . import bench_data as data

#: (result, p, rank, count, dtype, op) -> elements of this rank's result that are wrong
Check = Callable[[Any, int, int, int, DType, str], int]


@dataclass(frozen=True)
class Collective:
    """One benchmarked collective: how it runs, its bus bandwidth and its closed-form check."""

    name: str
    factor: str  # the bus-bandwidth factor as written in the module doc
    busbw: Callable[[float, int], float]  # (algbw, p) -> busbw
    run: Callable[[Any, Any, str], Any]  # (comm, rank's whole input, op) -> result
    check: Check


def _block(p: int, rank: int, count: int) -> slice:
    lo, hi = partition(count, p)[rank]
    return slice(lo, hi)


def _against(expected: Callable[[int, int, int, DType, str], np.ndarray], exact: bool) -> Check:
    """A check comparing with the whole expected vector (float64), within the tolerance of
    ``bench_data`` for reductions and exactly where data only moves."""
    def check(result: Any, p: int, rank: int, count: int, dtype: DType, op: str) -> int:
        want = expected(p, rank, count, dtype, op)
        got = data.as_float64(result).reshape(-1)
        if got.shape != want.shape:
            return max(got.size, want.size)
        tol = 0.0 if exact else data.tolerance(p, dtype, op)
        ok = np.abs(got - want) <= tol * np.maximum(np.abs(want), 1.0)
        return int(want.size - np.count_nonzero(ok))
    return check


def _scattered(p: int, rank: int, count: int, dtype: DType, op: str) -> np.ndarray:
    """Block ``rank`` of the reduction (the input repeats every 11 elements, so it does)."""
    return data.expected(p, dtype, op)[np.arange(count)[_block(p, rank, count)] % data.PERIOD]


def _gathered(p: int, rank: int, count: int, dtype: DType, op: str) -> np.ndarray:
    """Block q of rank q's input, for every q in order."""
    return np.concatenate([data.pattern(count, q, dtype)[_block(p, q, count)]
                           for q in range(p)]).astype(np.float64)


def _broadcast(p: int, rank: int, count: int, dtype: DType, op: str) -> np.ndarray:
    return data.pattern(count, 0, dtype).astype(np.float64)


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("allreduce", "2(p-1)/p", lambda algbw, p: algbw * 2 * (p - 1) / p,
               lambda comm, buf, op: collectives.allreduce(buf, op=op, comm=comm),
               lambda res, p, r, count, dtype, op: data.count_wrong(res, p, dtype, op)),
    Collective("reduce_scatter", "(p-1)/p", lambda algbw, p: algbw * (p - 1) / p,
               lambda comm, buf, op: collectives.reduce_scatter(buf, op=op, comm=comm),
               _against(_scattered, exact=False)),
    Collective("allgather", "(p-1)/p", lambda algbw, p: algbw * (p - 1) / p,
               lambda comm, buf, op: collectives.allgather(
                   buf[_block(comm.size, comm.rank, len(buf))], comm=comm),
               _against(_gathered, exact=True)),
    Collective("broadcast", "1", lambda algbw, p: algbw * 1.0,
               lambda comm, buf, op: collectives.broadcast(buf, root=0, comm=comm),
               _against(_broadcast, exact=True)),
)}

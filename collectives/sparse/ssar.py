"""SSAR recursive doubling (Renggli et al., SparCML, SC'19): log2(p) rounds in which partners
exchange their whole current sparse set and merge it. Latency-optimal; the sets grow as they
merge, so it suits very sparse inputs. Non-powers of two fold as the dense algorithm does."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING

import numpy as np

from ..algorithms.common import pof2_below
from ..algorithms.recursive_doubling import new_rank, real_rank
from ..transport.base import Request
from .common import Sparse, SparseJob, SparseSteps
from .merge import merge, pack, unpack

if TYPE_CHECKING:
    from ..costparams import CostParams


def _swap(job: SparseJob, peer: int, mine: np.ndarray, what: str) -> SparseSteps:
    """Send our packed set to ``peer`` and receive theirs (count first, then the bytes)."""
    comm, tag = job.comm, job.tag
    theirs_n = np.empty(1, np.int64)
    with comm.grouped():
        count = [comm.irecv(theirs_n, peer, tag, what),
                 comm.isend(np.array([mine.size], np.int64), peer, tag, what)]
    yield count
    theirs = np.empty(int(theirs_n[0]), np.uint8)
    with comm.grouped():
        reqs = [comm.isend(mine, peer, tag, what)] if mine.size else []
        if theirs.size:
            reqs.append(comm.irecv(theirs, peer, tag, what))
    yield reqs
    return theirs


def recursive_doubling_parts(job: SparseJob) -> Generator[list[Request], None, list[Sparse]]:
    """The result as sets whose ``merge`` (in list order) it is: the last merge is left to the
    caller, who may write it straight into a dense array (``merge.to_dense``)."""
    p, r = job.comm.size, job.comm.rank
    parts: list[Sparse] = [(job.idx, job.val)]
    rem = p - pof2_below(p)
    if r < 2 * rem and r % 2 == 0:  # hand the set to the odd neighbour, get the result back
        yield from _swap(job, r + 1, pack(*parts[0], job.size), "sparse fold")
        res = yield from _swap(job, r + 1, np.zeros(0, np.uint8), "sparse unfold")
        return [unpack(res, job.size, job.acc)]
    if r < 2 * rem:
        theirs = yield from _swap(job, r - 1, np.zeros(0, np.uint8), "sparse fold")
        parts = [parts[0], unpack(theirs, job.size, job.acc)]
    nr, pof2 = new_rank(r, p), pof2_below(p)
    mask = 1
    while mask < pof2:
        cur = merge(parts, job.acc)
        peer = real_rank(nr ^ mask, p)
        theirs = yield from _swap(job, peer, pack(*cur, job.size), f"sparse distance {mask}")
        got = unpack(theirs, job.size, job.acc)
        # Lower rank's set first on both sides: the same order gives the same bits.
        parts = [cur, got] if nr < nr ^ mask else [got, cur]
        mask <<= 1
    if r < 2 * rem:
        cur = merge(parts, job.acc)
        yield from _swap(job, r - 1, pack(*cur, job.size), "sparse unfold")
        return [cur]
    return parts


def recursive_doubling(job: SparseJob) -> SparseSteps:
    parts = yield from recursive_doubling_parts(job)
    return merge(parts, job.acc)


def price(p: int, n: int, k: int, c: CostParams, index_bytes: int, value_bytes: int) -> float:
    """Sum over rounds i < log2 p of alpha + min(2^i k, n)(I+V) beta: the set doubles."""
    e = index_bytes + value_bytes
    rounds = max(1, math.ceil(math.log2(p)))
    return sum(c.alpha + min((1 << i) * k, n) * e * c.beta for i in range(rounds))

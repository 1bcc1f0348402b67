"""Recursive-doubling allreduce (Thakur, Rabenseifner & Gropp 2005, section 4.4).

log2(p) rounds; in round i each rank exchanges its whole partial result with the rank whose
index differs in bit i and reduces. Few steps, n*log2(p) bytes: the choice for short messages.
A non-power-of-two p is first folded as MPICH does: of the first 2*rem ranks (rem = p - 2^k)
each even rank hands its vector to the odd rank after it and sits out, receiving the result at
the end. Partners always combine the same two partial results and the ops commute bit for bit,
so every rank ends with identical bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .common import Job, Steps, pof2_below, segments

if TYPE_CHECKING:
    from ..costparams import CostParams


def _fold_partner(job: Job) -> tuple[bool, int] | None:
    """(sits_out, neighbour) for the first 2*rem ranks, None for the others."""
    r, rem = job.comm.rank, job.comm.size - pof2_below(job.comm.size)
    if r >= 2 * rem:
        return None
    return (True, r + 1) if r % 2 == 0 else (False, r - 1)


def folded(job: Job, body: Callable[[int, int], Steps]) -> Steps:
    """Fold the ranks beyond the largest power of two p' into their neighbours, run
    ``body(new_rank, p')`` on the p' participants, and hand the result back to the others."""
    work, p = job.work, job.comm.size
    if p == 1 or work.size == 0:
        return
    role = _fold_partner(job)
    segs = segments(0, work.size, job.segment)
    if role is not None and role[0]:
        yield [job.isend(work[a:b], role[1], "fold: hand vector to neighbour") for a, b in segs]
        yield [job.irecv(work[a:b], role[1], "unfold: result from neighbour") for a, b in segs]
        return
    if role is not None:
        tmp = job.scratch(work.size)
        recvs = [job.irecv(tmp[a:b], role[1], "fold: vector of neighbour") for a, b in segs]
        for req, (a, b) in zip(recvs, segs, strict=True):
            yield [req]
            job.combine(work[a:b], tmp[a:b])
    yield from body(new_rank(job.comm.rank, p), pof2_below(p))
    if role is not None:
        yield [job.isend(work[a:b], role[1], "unfold: result to neighbour") for a, b in segs]


def new_rank(rank: int, size: int) -> int:
    """Index among the power-of-two participants, or -1 for a rank that sat out."""
    rem = size - pof2_below(size)
    if rank < 2 * rem:
        return rank // 2 if rank % 2 else -1
    return rank - rem


def real_rank(nr: int, size: int) -> int:
    rem = size - pof2_below(size)
    return 2 * nr + 1 if nr < rem else nr + rem


def allreduce(job: Job) -> Steps:
    def body(nr: int, pof2: int) -> Steps:
        work, p = job.work, job.comm.size
        segs = segments(0, work.size, job.segment)
        tmp = job.scratch(work.size)
        mask = 1
        while mask < pof2:
            peer = real_rank(nr ^ mask, p)
            what = f"recursive doubling distance {mask}"
            with job.comm.grouped():
                recvs = [job.irecv(tmp[a:b], peer, what) for a, b in segs]
                sends = [job.isend(work[a:b], peer, what) for a, b in segs]
            for rq, sq, (a, b) in zip(recvs, sends, segs, strict=True):
                yield [rq, sq]  # our segment is sent before we overwrite it
                job.combine(work[a:b], tmp[a:b])
            mask <<= 1

    yield from folded(job, body)


def fold_cost(p: int, n: float, c: CostParams) -> float:
    """F = 2(alpha + n beta) + n gamma when p is no power of two (the extra ranks hand their
    vector over and get the result back), else 0."""
    pof2 = 1 << (p.bit_length() - 1)
    return 0.0 if p == pof2 else 2 * (c.alpha + n * c.beta) + n * c.gamma


def fold_bytes(p: int, nbytes: int) -> int:
    """What folding adds to the busiest rank: the result handed back, n (0 for p = p')."""
    return 0 if p == pof2_below(p) else nbytes


def cost(p: int, n: float, c: CostParams, s: float) -> float:
    """log2(p') (alpha + n beta + n gamma) + F."""
    lg = p.bit_length() - 1
    return lg * (c.alpha + n * c.beta + n * c.gamma) + fold_cost(p, n, c)


def wire_bytes(p: int, nbytes: int) -> float:
    """log2(p') full vectors, plus the folded neighbour's result: log2(p') n + n."""
    return (p.bit_length() - 1) * nbytes + fold_bytes(p, nbytes)

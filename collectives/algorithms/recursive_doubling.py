"""Recursive-doubling allreduce (Thakur, Rabenseifner & Gropp 2005, section 4.4).

log2(p) rounds; in round i each rank exchanges its whole partial result with the rank whose
index differs in bit i and reduces. Few steps, n*log2(p) bytes: the choice for short messages.
A non-power-of-two p is first folded as MPICH does: of the first 2*rem ranks (rem = p - 2^k)
each even rank hands its vector to the odd rank after it and sits out, receiving the result at
the end. Partners always combine the same two partial results and the ops commute bit for bit,
so every rank ends with identical bits.
"""

from __future__ import annotations

from .common import Job, Steps, pof2_below, segments


def fold(job: Job) -> Steps:
    """Fold ranks beyond the largest power of two into their neighbours (see module doc)."""
    comm, work = job.comm, job.work
    r, rem = comm.rank, comm.size - pof2_below(comm.size)
    if r >= 2 * rem:
        return
    segs = segments(0, work.size, job.segment)
    if r % 2 == 0:
        yield [job.isend(work[a:b], r + 1, "fold: hand vector to neighbour") for a, b in segs]
    else:
        tmp = job.scratch(work.size)
        recvs = [job.irecv(tmp[a:b], r - 1, "fold: vector of neighbour") for a, b in segs]
        for req, (a, b) in zip(recvs, segs, strict=True):
            yield [req]
            job.combine(work[a:b], tmp[a:b])


def unfold(job: Job) -> Steps:
    """Return the result to the ranks that sat out."""
    comm, work = job.comm, job.work
    r, rem = comm.rank, comm.size - pof2_below(comm.size)
    if r >= 2 * rem:
        return
    segs = segments(0, work.size, job.segment)
    if r % 2 == 0:
        yield [job.irecv(work[a:b], r + 1, "unfold: result from neighbour") for a, b in segs]
    else:
        yield [job.isend(work[a:b], r - 1, "unfold: result to neighbour") for a, b in segs]


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
    comm, work = job.comm, job.work
    p = comm.size
    if p == 1 or work.size == 0:
        return
    yield from fold(job)
    nr, pof2 = new_rank(comm.rank, p), pof2_below(p)
    if nr >= 0:
        segs = segments(0, work.size, job.segment)
        tmp = job.scratch(work.size)
        mask = 1
        while mask < pof2:
            peer = real_rank(nr ^ mask, p)
            what = f"recursive doubling distance {mask}"
            recvs = [job.irecv(tmp[a:b], peer, what) for a, b in segs]
            sends = [job.isend(work[a:b], peer, what) for a, b in segs]
            for rq, sq, (a, b) in zip(recvs, sends, segs, strict=True):
                yield [rq, sq]  # our segment is sent before we overwrite it
                job.combine(work[a:b], tmp[a:b])
            mask <<= 1
    yield from unfold(job)

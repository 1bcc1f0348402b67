"""Rabenseifner's allreduce: recursive-halving reduce-scatter + recursive-doubling allgather.

(Thakur, Rabenseifner & Gropp 2005, section 4.4; Rabenseifner 2004.) In round i of the
reduce-scatter each rank sends half of its current range to the partner at distance p/2^i and
reduces the other half; after log2(p) rounds rank i owns block i, fully reduced. The allgather
retraces the rounds. Bandwidth 2(p-1)/p * n like the ring, with log2(p) instead of p-1
latencies. Non-powers of two fold first, as in recursive doubling. Each block is reduced on one
rank only and then copied, so all ranks end with identical bits.
"""

from __future__ import annotations

from .common import Job, Steps, partition, pof2_below
from .recursive_doubling import fold, new_rank, real_rank, unfold


def allreduce(job: Job) -> Steps:
    comm, work = job.comm, job.work
    p = comm.size
    if p == 1 or work.size == 0:
        return
    yield from fold(job)
    nr, pof2 = new_rank(comm.rank, p), pof2_below(p)
    if nr >= 0:
        blocks = partition(work.size, pof2)
        tmp = job.scratch(work.size)
        lo_b, hi_b = 0, pof2  # the block range this rank is responsible for
        sends_all = []
        dist = pof2 // 2
        while dist >= 1:  # recursive halving
            peer = real_rank(nr ^ dist, p)
            mid = (lo_b + hi_b) // 2
            lower, upper = (lo_b, mid), (mid, hi_b)
            keep, give = (lower, upper) if nr & dist == 0 else (upper, lower)
            ka, kb = blocks[keep[0]][0], blocks[keep[1] - 1][1]
            ga, gb = blocks[give[0]][0], blocks[give[1] - 1][1]
            what = f"recursive halving distance {dist}"
            reqs = []
            if kb > ka:
                reqs.append(job.irecv(tmp[ka:kb], peer, what))
            if gb > ga:
                sends_all.append(job.isend(work[ga:gb], peer, what))
            yield reqs
            job.combine(work[ka:kb], tmp[ka:kb])
            lo_b, hi_b = keep
            dist //= 2
        yield sends_all  # sent halves are received into during the allgather
        dist = 1
        while dist < pof2:  # recursive doubling allgather: the partner owns the sibling range
            peer = real_rank(nr ^ dist, p)
            size = hi_b - lo_b
            plo = lo_b + size if nr & dist == 0 else lo_b - size
            pa, pb = blocks[plo][0], blocks[plo + size - 1][1]
            ma, mb = blocks[lo_b][0], blocks[hi_b - 1][1]
            what = f"recursive doubling allgather distance {dist}"
            reqs = []
            if pb > pa:
                reqs.append(job.irecv(work[pa:pb], peer, what))
            if mb > ma:
                reqs.append(job.isend(work[ma:mb], peer, what))
            yield reqs
            lo_b, hi_b = min(lo_b, plo), max(hi_b, plo + size)
            dist *= 2
    yield from unfold(job)

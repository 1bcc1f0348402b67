"""Rabenseifner's allreduce: recursive-halving reduce-scatter + recursive-doubling allgather.

(Thakur, Rabenseifner & Gropp 2005, section 4.4; Rabenseifner 2004.) In round i of the
reduce-scatter each rank sends half of its current range to the partner at distance p/2^i and
reduces the other half; after log2(p) rounds rank i owns block i, fully reduced. The allgather
retraces the rounds. Bandwidth 2(p-1)/p * n like the ring, with log2(p) instead of p-1
latencies. Non-powers of two fold first, as in recursive doubling. Each block is reduced on one
rank only and then copied, so all ranks end with identical bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .common import Job, Steps, partition, pof2_below
from .recursive_doubling import fold_bytes, fold_cost, folded, real_rank

if TYPE_CHECKING:
    from ..costparams import CostParams


def allreduce(job: Job) -> Steps:
    def body(nr: int, pof2: int) -> Steps:
        work, p = job.work, job.comm.size
        blocks = partition(work.size, pof2)

        def span(lo_b: int, hi_b: int) -> tuple[int, int]:
            """Element range of blocks [lo_b, hi_b)."""
            return blocks[lo_b][0], blocks[hi_b - 1][1]

        tmp = job.scratch(work.size)
        lo_b, hi_b = 0, pof2  # the block range this rank is responsible for
        sends = []
        dist = pof2 // 2
        while dist >= 1:  # recursive halving
            peer = real_rank(nr ^ dist, p)
            mid = (lo_b + hi_b) // 2
            lower, upper = (lo_b, mid), (mid, hi_b)
            keep, give = (lower, upper) if nr & dist == 0 else (upper, lower)
            (ka, kb), (ga, gb) = span(*keep), span(*give)
            what = f"recursive halving distance {dist}"
            with job.comm.grouped():
                reqs = [job.irecv(tmp[ka:kb], peer, what)] if kb > ka else []
                if gb > ga:
                    sends.append(job.isend(work[ga:gb], peer, what))
            yield reqs
            job.combine(work[ka:kb], tmp[ka:kb])
            lo_b, hi_b = keep
            dist //= 2
        yield sends  # sent halves are received into during the allgather
        dist = 1
        while dist < pof2:  # recursive doubling allgather: the partner owns the sibling range
            peer = real_rank(nr ^ dist, p)
            size = hi_b - lo_b
            plo = lo_b + size if nr & dist == 0 else lo_b - size
            (pa, pb), (ma, mb) = span(plo, plo + size), span(lo_b, hi_b)
            what = f"recursive doubling allgather distance {dist}"
            with job.comm.grouped():
                reqs = [job.irecv(work[pa:pb], peer, what)] if pb > pa else []
                if mb > ma:
                    reqs.append(job.isend(work[ma:mb], peer, what))
            yield reqs
            lo_b, hi_b = min(lo_b, plo), max(hi_b, plo + size)
            dist *= 2

    yield from folded(job, body)


def cost(p: int, n: float, c: CostParams, s: float) -> float:
    """2 log2(p') alpha + 2(p'-1)/p' n beta + (p'-1)/p' n gamma + F."""
    pof2 = 1 << (p.bit_length() - 1)
    lg = pof2.bit_length() - 1
    return (2 * lg * c.alpha + 2 * (pof2 - 1) / pof2 * n * c.beta
            + (pof2 - 1) / pof2 * n * c.gamma + fold_cost(p, n, c))


def wire_bytes(p: int, nbytes: int) -> float:
    """Halves down, then up again: 2(p'-1)/p' n, plus the folded neighbour's result n."""
    pof2 = pof2_below(p)
    return 2 * (pof2 - 1) / pof2 * nbytes + fold_bytes(p, nbytes)

"""Ring allreduce: reduce-scatter then allgather around a ring, segmented and pipelined.

Each of the p-1 reduce-scatter steps moves one block (n/p elements) to the right neighbour;
a block is cut into segments so that segment k+1 is in flight while segment k is reduced, and a
reduced segment leaves for the next step at once. Bandwidth-optimal: 2(p-1)/p * n bytes per
rank, the same for any p. Every block is reduced once along a fixed chain and then copied, so
all ranks end with identical bits.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .common import Job, Steps, partition, segments

if TYPE_CHECKING:
    from ..costparams import CostParams


def reduce_scatter(job: Job, blocks: list[tuple[int, int]]) -> Steps:
    """After this, rank r holds the fully reduced ``blocks[r]`` of ``job.work``."""
    work, p, r = job.work, job.comm.size, job.comm.rank
    if p == 1:
        return
    right, left = (r + 1) % p, (r - 1) % p
    send_idx = [(r - s - 1) % p for s in range(p - 1)]
    recv_idx = [(r - s - 2) % p for s in range(p - 1)]  # recv_idx[s] == send_idx[s + 1]
    width = max(hi - lo for lo, hi in blocks)
    tmp = [job.scratch(width), job.scratch(width)]

    def post_recvs(s: int) -> list:
        lo, hi = blocks[recv_idx[s]]
        buf = tmp[s % 2]
        return [job.irecv(buf[a - lo:b - lo], left, f"ring reduce-scatter step {s}")
                for a, b in segments(lo, hi, job.segment)]

    lo, hi = blocks[send_idx[0]]
    with job.comm.grouped():  # with p = 2 both go to the same peer
        sends = [job.isend(work[a:b], right, "ring reduce-scatter step 0")
                 for a, b in segments(lo, hi, job.segment)]
        recvs = post_recvs(0)
    for s in range(p - 1):
        upcoming = post_recvs(s + 1) if s + 1 < p - 1 else []
        lo, hi = blocks[recv_idx[s]]
        for req, (a, b) in zip(recvs, segments(lo, hi, job.segment), strict=True):
            yield [req]
            job.combine(work[a:b], tmp[s % 2][a - lo:b - lo])
            if s + 1 < p - 1:  # this segment is final for this step: pass it on now
                sends.append(job.isend(work[a:b], right, f"ring reduce-scatter step {s + 1}"))
        recvs = upcoming
    yield sends


def allgather(job: Job, blocks: list[tuple[int, int]]) -> Steps:
    """Rank r starts with ``blocks[r]`` of ``job.work``; every rank ends with all blocks."""
    work, p, r = job.work, job.comm.size, job.comm.rank
    if p == 1:
        return
    right, left = (r + 1) % p, (r - 1) % p
    recv_idx = [(r - s - 1) % p for s in range(p - 1)]

    def post_recvs(s: int) -> list:
        lo, hi = blocks[recv_idx[s]]
        return [job.irecv(work[a:b], left, f"ring allgather step {s}")
                for a, b in segments(lo, hi, job.segment)]

    # Every step lands in its own block, so all receives go up front; step 0's with the
    # sends of step 0 as one group (with p = 2 they go to the same peer), the later ones
    # after it (a group completes as a whole: a later step's receive must not hold it).
    with job.comm.grouped():
        recvs = [post_recvs(0)]
        lo, hi = blocks[r]
        sends = [job.isend(work[a:b], right, "ring allgather step 0")
                 for a, b in segments(lo, hi, job.segment)]
    recvs.extend(post_recvs(s) for s in range(1, p - 1))
    for s in range(p - 1):
        lo, hi = blocks[recv_idx[s]]
        for req, (a, b) in zip(recvs[s], segments(lo, hi, job.segment), strict=True):
            yield [req]
            if s + 1 < p - 1:
                sends.append(job.isend(work[a:b], right, f"ring allgather step {s + 1}"))
    yield sends


def allreduce(job: Job) -> Steps:
    """Ring allreduce = ring reduce-scatter + ring allgather on balanced blocks."""
    blocks = partition(job.work.size, job.comm.size)
    yield from reduce_scatter(job, blocks)
    yield from allgather(job, blocks)


def cost(p: int, n: float, c: CostParams, s: float) -> float:
    """2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma, plus alpha per extra segment of a
    block (ceil(n/(p s)) messages a step)."""
    msgs = max(1, math.ceil(n / p / s))
    return (2 * (p - 1) * msgs * c.alpha + 2 * (p - 1) / p * n * c.beta
            + (p - 1) / p * n * c.gamma)


def wire_bytes(p: int, nbytes: int) -> float:
    """Each rank sends p-1 blocks in each half: 2(p-1)/p n."""
    return 2 * (p - 1) / p * nbytes

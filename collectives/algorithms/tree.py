"""Binomial-tree allreduce: segmented binomial reduce to rank 0, then binomial broadcast.

Latency-optimal for small messages: 2*ceil(log2 p) message steps. Both halves are pipelined by
segment (a node forwards segment k up the tree while segment k+1 is still arriving from its
children), which gives a large message the throughput of a pipeline instead of
log p * n / bandwidth. We keep the binomial tree for large messages too rather than a separate
pipelined binary tree: with segmentation its depth only adds log p segment delays, and its
root reduces from log p children. The result is computed once at the root and broadcast, so
every rank ends with identical bits.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from .common import Job, Steps, segments

if TYPE_CHECKING:
    from ..costparams import CostParams

WINDOW = 4  # receive segments in flight per child during the reduce


def _children(vr: int, p: int) -> list[int]:
    """Children of virtual rank ``vr`` in a binomial tree rooted at 0 (smallest subtree first)."""
    low = vr & -vr if vr else 1 << p.bit_length()
    out, k = [], 1
    while k < low and vr + k < p:
        out.append(vr + k)
        k <<= 1
    return out


def _parent(vr: int) -> int:
    return vr - (vr & -vr)


def _shape(job: Job, root: int) -> tuple[list[tuple[int, int]], list[int], int | None]:
    """This rank's segments, children (smallest subtree first) and parent in the binomial
    tree rooted at ``root``; no segments when there is nothing to move."""
    p = job.comm.size
    vr = (job.comm.rank - root) % p
    segs = segments(0, job.work.size, job.segment) if p > 1 else []
    children = [(c + root) % p for c in _children(vr, p)]
    parent = None if vr == 0 else (_parent(vr) + root) % p
    return segs, children, parent


def reduce(job: Job, root: int = 0) -> Steps:
    """Binomial reduce of ``job.work`` to ``root`` (other ranks' buffers become scratch)."""
    work = job.work
    segs, children, parent = _shape(job, root)
    if not segs:
        return
    width = segs[0][1] - segs[0][0]  # the first segment is the widest
    slots = {c: [job.scratch(width) for _ in range(WINDOW)] for c in children}
    queues: dict[int, deque] = {c: deque() for c in children}

    def post(c: int, k: int) -> None:
        a, b = segs[k]
        queues[c].append(job.irecv(slots[c][k % WINDOW][:b - a], c, f"tree reduce segment {k}"))

    for c in children:
        for k in range(min(WINDOW, len(segs))):
            post(c, k)
    sends = []
    for k, (a, b) in enumerate(segs):
        for c in children:  # a fixed order of children keeps the summation order fixed
            yield [queues[c].popleft()]
            job.combine(work[a:b], slots[c][k % WINDOW][:b - a])
            if k + WINDOW < len(segs):
                post(c, k + WINDOW)
        if parent is not None:
            sends.append(job.isend(work[a:b], parent, f"tree reduce segment {k}"))
    yield sends


def broadcast(job: Job, root: int = 0) -> Steps:
    """Binomial broadcast of ``job.work`` from ``root``, segmented and pipelined."""
    work = job.work
    segs, children, parent = _shape(job, root)
    if not segs:
        return
    children.reverse()  # largest subtree first: it has the longest way to go
    recvs = ([job.irecv(work[a:b], parent, f"broadcast segment {k}")
              for k, (a, b) in enumerate(segs)] if parent is not None else [])
    sends = []
    for k, (a, b) in enumerate(segs):
        if recvs:
            yield [recvs[k]]
        sends.extend(job.isend(work[a:b], c, f"broadcast segment {k}") for c in children)
    yield sends


def allreduce(job: Job) -> Steps:
    """Binomial reduce to rank 0, then binomial broadcast from rank 0."""
    yield from reduce(job, 0)
    yield from broadcast(job, 0)


def _ceil_log2(p: int) -> int:
    return max(0, (p - 1).bit_length())


def cost(p: int, n: float, c: CostParams, s: float) -> float:
    """Reduce + broadcast pipelined over k = ceil(n/s) segments, each step paced by the root,
    whose one link carries a segment per child (L = ceil(log2 p) children):
    (L + k - 1)(alpha + L s beta) + k L s gamma  (reduce)  + (L + k - 1)(alpha + L s beta)."""
    L = _ceil_log2(p)
    k = max(1, math.ceil(n / s))
    # Bytes are paced by the root: each of the k segments comes in from its L children and
    # goes out to them again through its one link (the other links fill the pipeline while
    # the root's is busy). Latency follows the k segments down a chain of depth L.
    return 2 * (L + k - 1) * c.alpha + 2 * L * n * c.beta + L * n * c.gamma


def wire_bytes(p: int, nbytes: int) -> int:
    """The root broadcasts the vector to its L = ceil(log2 p) children: L n (every other rank
    sends it to its parent and fewer children)."""
    return _ceil_log2(p) * nbytes

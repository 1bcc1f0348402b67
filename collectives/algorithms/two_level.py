"""Two-level allreduce: reduce-scatter inside each host, allreduce of each shard across hosts,
allgather inside the host.

On hosts of L ranks each, the host's vector is cut into L shards (sizes differ by at most one
element). A ring reduce-scatter on the intra-host communicator leaves local rank i with shard
i summed over its host; the L local ranks then allreduce their shards across hosts in
parallel, each on its own cross-host communicator (the ranks of local index i), with the flat
algorithm named by ``CROSS``; a ring allgather inside the host puts the shards back together.
Only n/L bytes per rank cross hosts, and the cross-host step pays 2(H-1) latencies instead
of the flat ring's 2(p-1).

A large vector is pipelined: cut into up to ``PIECES`` chunks of at least ``PIECE_BYTES``,
each reduced as above, the cross-host step of chunk k runs while the host allgathers chunk
k-1 and reduce-scatters chunk k+1, so the time inside the host hides under the network's
but for the first reduce-scatter and the last allgather. Each communicator carries one
stream of the call at a time, in the same order on every rank.

Where hosts hold different numbers of ranks the shards would not line up across hosts, so the
vector goes through the host's first rank instead: binomial reduce to it, allreduce among
those leaders with ``CROSS``, binomial broadcast from it. On one host the algorithm is the
ring; with one rank per host it is ``CROSS`` itself.

Every rank ends with identical bits: each shard is reduced across hosts by an algorithm that
gives every rank of its cross-host communicator the same bits, and the intra-host allgather
(or broadcast) only copies them. The topology and the sub-communicators are made on a
communicator's first two-level call, collectively, before its first message (see
``collectives.topology``); messages on them carry the call's own tag, so several calls in
flight stay apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..interleave import concurrently
from ..topology import host_comms, topology
from ..transport.base import Communicator
from . import ring, tree
from .common import Job, Steps, chained, partition
from .registry import Algorithm, get

if TYPE_CHECKING:
    from ..costparams import CostParams

#: the flat algorithm (a registered name) of the cross-host step; "ring" by default
CROSS = "ring"
#: most chunks of a pipelined call, and the least bytes of one (on 2 x 2 emulated ranks at
#: 1 Gbit/s, 7 MB float32 took 62 ms in 7 chunks against 69 ms in one; 16 MB 143 ms in 8,
#: 148 ms in 4)
PIECES = 8
PIECE_BYTES = 1 << 20


def pieces(nbytes: float) -> int:
    """Chunks a call of ``nbytes`` is pipelined in (1: not pipelined)."""
    return int(max(1, min(PIECES, nbytes // PIECE_BYTES)))


#: a ring step inside the host on a chunk's blocks (reduce-scatter or allgather)
HostStep = Callable[[Job, list[tuple[int, int]]], Steps]


def pipeline(chunks: int, inside: Callable[[int, HostStep], Steps],
             across: Callable[[int], Steps]) -> Steps:
    """The two-level schedule of ``chunks`` chunks: chunk 0 reduce-scattered inside the
    host, then chunk k's crossing (``across(k)``) alongside the host's allgather of chunk k-1
    and reduce-scatter of chunk k+1 (``inside(k, step)``), then the last chunk's allgather.
    One chunk: the three steps one after another."""
    last = chunks - 1
    yield from inside(0, ring.reduce_scatter)
    for k in range(chunks):
        host = [inside(k - 1, ring.allgather)] if k else []
        host += [inside(k + 1, ring.reduce_scatter)] if k < last else []
        yield from concurrently([across(k), chained(*host)]) if host else across(k)
    yield from inside(last, ring.allgather)


def cross_algorithm() -> Algorithm:
    """The registry's entry of ``CROSS`` (ValueError where it names no flat algorithm)."""
    if CROSS == "two_level":
        raise ValueError("the cross-host step of two_level needs a flat algorithm (ring, "
                         "tree, recursive_doubling, rabenseifner, mpi or torch), not "
                         "two_level itself")
    return get(CROSS)


def prepare(comm: Communicator, *, timeout: float | None = None) -> None:
    """Check ``CROSS`` and make what the algorithm runs on: the topology and, where there are
    several hosts and several ranks on some host, the sub-communicators (collective on a
    communicator's first call, each wait bounded by ``timeout``; then cached). Call it where
    every rank calls it in the same order, before the call's first message."""
    cross_algorithm()
    topo = topology(comm, timeout=timeout)
    if 1 < topo.n_hosts < comm.size:
        host_comms(comm, timeout=timeout)


def _on(job: Job, comm: Communicator, work: np.ndarray) -> Job:
    """The part of ``job`` that runs on a sub-communicator: same tag, dtype, op, segment."""
    return replace(job, comm=comm, work=work, blocks=[])


def allreduce(job: Job) -> Steps:
    """Two-level allreduce of ``job.work`` (see the module's docstring)."""
    comm = job.comm
    topo = topology(comm)
    cross = cross_algorithm().run
    if topo.n_hosts == 1:  # one host: the intra-host ring is the whole ring
        yield from ring.allreduce(job)
        return
    if topo.n_hosts == comm.size:  # one rank per host: only the cross-host step is left
        yield from cross(job)
        return
    subs = host_comms(comm)
    if topo.uniform:
        # (an engine that ignores tags, NCCL, keeps one stream of the call at a time)
        chunks = partition(job.work.size,
                           pieces(job.work.nbytes) if comm.matches_by_tag else 1)
        local = [partition(hi - lo, topo.local_size) for lo, hi in chunks]

        def inside(k: int, step: HostStep) -> Steps:
            lo, hi = chunks[k]
            return step(_on(job, subs.intra, job.work[lo:hi]), local[k])

        def across(k: int) -> Steps:
            a, b = local[k][topo.local_rank]
            lo = chunks[k][0]
            return cross(_on(job, subs.cross, job.work[lo + a:lo + b]))

        yield from pipeline(len(chunks), inside, across)
    else:  # hosts of different sizes: through each host's first rank
        intra = _on(job, subs.intra, job.work)
        yield from tree.reduce(intra, 0)
        if topo.local_rank == 0:
            yield from cross(_on(job, subs.cross, job.work))
        yield from tree.broadcast(intra, 0)


def cost(p: int, n: float, c: CostParams, s: float) -> float:
    """Seconds on the hosts ``c.layout(p)`` describes, each step on its own link class
    (``c.on``; the cross-host step priced by ``CROSS``'s formula, the ring's for the engines'
    own algorithms). On H hosts of L ranks:

        ring(L, n) on the intra class:  2(L-1) ceil(n/(L s)) a_i + 2(L-1)/L n b_i + (L-1)/L n g
        + CROSS(H, n/L) on the cross class, e.g. the ring's
                                        2(H-1) ceil(n/(L H s)) a_c + 2(H-1)/H (n/L) b_c
                                        + (H-1)/H (n/L) g

    where b_c is the per-rank rate while all L local ranks cross at once (L times the NIC's
    where they share one: a host's uplink then carries 2(H-1)/H n each way). Pipelined in
    k = ``pieces(n)`` chunks, with I and X those two terms for one chunk (n/k):
    I + 2 max(X, I/2) + (k-2) max(X, I). On one host
    this is the ring itself, with the ring's formula on the flat link (so it never beats the
    ring there); with one rank per host, CROSS on the cross class. Hosts of different sizes
    (leaders): tree(largest host, n) on the intra class + CROSS(H, n) on the cross class,
    charged at the cross class's fitted rate (the leaders cross alone: an estimate on the
    slow side where local ranks share an uplink)."""
    sizes = c.layout(p)
    hosts = len(sizes)
    if hosts == 1:
        return ring.cost(p, n, c, s)
    entry = cross_algorithm()
    across = entry.cost or ring.cost
    if hosts == p:
        return across(p, n, c.on("cross", (1,) * p), s)
    if len(set(sizes)) == 1:
        local, k = sizes[0], pieces(n)
        inside = ring.cost(local, n / k, c.on("intra", (local,)), s)  # a chunk's RS + AG
        out = across(hosts, n / local / k, c.on("cross", (1,) * hosts), s)
        if k == 1:
            return inside + out
        # the first reduce-scatter and last allgather alone; rounds 0 and k-1 hide one half
        # of a chunk's steps inside the host under its crossing, the others both halves
        return inside + 2 * max(out, inside / 2) + (k - 2) * max(out, inside)
    return (tree.cost(max(sizes), n, c.on("intra", (max(sizes),)), s)
            + across(hosts, n, c.on("cross", (1,) * hosts), s))


def wire_bytes(p: int, nbytes: int) -> float:
    """On uniform hosts (H hosts of L ranks, ``CROSS`` = ring), each rank sends
    2(L-1)/L n inside its host and 2(H-1)/H n/L across hosts: 2(p-1)/p n in all, as the flat
    ring; one host or one rank per host is the ring itself."""
    return 2 * (p - 1) / p * nbytes

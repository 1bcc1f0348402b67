"""Two-level allreduce: reduce-scatter inside each host, allreduce of each shard across hosts,
allgather inside the host.

On hosts of L ranks each, the host's vector is cut into L shards (sizes differ by at most one
element). A ring reduce-scatter on the intra-host communicator leaves local rank i with shard
i summed over its host; the L local ranks then allreduce their shards across hosts in
parallel, each on its own cross-host communicator (the ranks of local index i), with the flat
algorithm named by ``CROSS``; a ring allgather inside the host puts the shards back together.
Only n/L bytes per rank cross hosts, and the cross-host step pays 2(H-1) latencies instead
of the flat ring's 2(p-1).

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

import numpy as np

from ..topology import host_comms, topology
from ..transport.base import Communicator
from . import ring, tree
from .common import Job, Steps, partition

#: the flat algorithm (a registered name) of the cross-host step; "ring" by default
CROSS = "ring"


def _cross() -> Callable[[Job], Steps]:
    from . import get  # the registry, which imports this module

    if CROSS == "two_level":
        raise ValueError("the cross-host step of two_level needs a flat algorithm (ring, "
                         "tree, recursive_doubling, rabenseifner, mpi or torch), not "
                         "two_level itself")
    return get(CROSS).run


def _on(job: Job, comm: Communicator, work: np.ndarray) -> Job:
    """The part of ``job`` that runs on a sub-communicator: same tag, dtype, op, segment."""
    return replace(job, comm=comm, work=work, blocks=[])


def allreduce(job: Job) -> Steps:
    """Two-level allreduce of ``job.work`` (see the module's docstring)."""
    comm = job.comm
    topo = topology(comm)
    cross = _cross()
    if topo.n_hosts == 1:  # one host: the intra-host ring is the whole ring
        yield from ring.allreduce(job)
        return
    if topo.n_hosts == comm.size:  # one rank per host: only the cross-host step is left
        yield from cross(job)
        return
    subs = host_comms(comm)
    intra = _on(job, subs.intra, job.work)
    if topo.uniform:
        blocks = partition(job.work.size, topo.local_size)
        yield from ring.reduce_scatter(intra, blocks)
        lo, hi = blocks[topo.local_rank]
        yield from cross(_on(job, subs.cross, job.work[lo:hi]))
        yield from ring.allgather(intra, blocks)
    else:  # hosts of different sizes: through each host's first rank
        yield from tree.reduce(intra, 0)
        if topo.local_rank == 0:
            yield from cross(_on(job, subs.cross, job.work))
        yield from tree.broadcast(intra, 0)


def wire_bytes(p: int, nbytes: int) -> float:
    """On uniform hosts (H hosts of L ranks, ``CROSS`` = ring), each rank sends
    2(L-1)/L n inside its host and 2(H-1)/H n/L across hosts: 2(p-1)/p n in all, as the flat
    ring; one host or one rank per host is the ring itself."""
    return 2 * (p - 1) / p * nbytes

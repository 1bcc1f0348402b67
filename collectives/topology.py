"""Which ranks share a host, agreed through the communicator, and the sub-communicators a
two-level collective runs on (inside each host, across hosts), made once per communicator.

A rank's host key is, first found: ``COMPCOLL_HOST`` (a host group name, e.g. to emulate
several hosts on one machine); torchrun's node (``GROUP_RANK``, or the node's first global
rank ``RANK - LOCAL_RANK``, where ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are set); else the
hostname and the kernel's boot id, so two machines that share a hostname stay apart. Ranks
exchange a 128-bit digest of their key in one small allgather. A torchrun variable that is
not a rank (``LOCAL_RANK=x``) raises ValueError naming it on that rank, and the allgather
tells the others, which raise too instead of waiting.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .transport.base import Communicator
from .transport.split import split_by

#: the environment variable that names this rank's host group (it wins over detection)
ENV = "COMPCOLL_HOST"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id(path: Path = BOOT_ID) -> str:
    """The kernel's boot id, new at every boot ("" where the kernel has none)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def host_key(env: Mapping[str, str] | None = None, hostname: str | None = None,
             boot: str | None = None) -> str:
    """This rank's host key (see the module's docstring); ``env``, ``hostname`` and ``boot``
    default to this process's environment, ``socket.gethostname()`` and :func:`boot_id`.

    Example::

        >>> from collectives.topology import host_key
        >>> host_key({"COMPCOLL_HOST": "rack1-a"})
        'override:rack1-a'
        >>> host_key({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2"})
        'torchrun:node 2'
    """
    env = os.environ if env is None else env
    override = env.get(ENV, "").strip()
    if override:
        return f"override:{override}"
    if "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" in env:
        if env.get("GROUP_RANK", "").strip():
            return f"torchrun:node {_rank_of(env, 'GROUP_RANK')}"
        if env.get("RANK", "").strip():  # torchrun numbers a node's ranks consecutively
            return f"torchrun:first rank {_rank_of(env, 'RANK') - _rank_of(env, 'LOCAL_RANK')}"
    host = socket.gethostname() if hostname is None else hostname
    return f"host:{host} boot:{boot_id() if boot is None else boot}"


def _rank_of(env: Mapping[str, str], name: str) -> int:
    """The whole number >= 0 in ``env[name]`` (a launcher's rank variable); else ValueError
    naming the variable, its value and how to go on."""
    raw = env.get(name, "")
    text = raw.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{name}={raw!r} is not a rank (a whole number >= 0), so this rank's "
                         f"host cannot be told from torchrun's variables; fix or unset "
                         f"{name}, or name the host group with {ENV}")
    return int(text)


def digest(key: str) -> list[int]:
    """Two int64 words of the key's SHA-256: distinct keys collide with odds about 2^-128."""
    return np.frombuffer(hashlib.sha256(key.encode()).digest()[:16], dtype=np.int64).tolist()


@dataclass(frozen=True)
class Topology:
    """The hosts of a communicator, seen from one rank.

    ``hosts`` holds each host's ranks in rank order, hosts ordered by their lowest rank;
    ``host_of_rank[r]`` is the index of rank r's host. The rest describe this rank
    (``host_index``, ``local_rank``: its index on its host, ``local_size``) and the layout:
    ``uniform`` when every host holds as many ranks, ``contiguous`` when every host's ranks
    are consecutive.

    Example::

        >>> from collectives.topology import Topology
        >>> t = Topology.from_keys(["a", "b", "a", "b"], rank=2)  # ranks 0, 2 share host a
        >>> (t.hosts, t.host_index, t.local_rank, t.uniform, t.contiguous)
        (((0, 2), (1, 3)), 0, 1, True, False)
    """

    hosts: tuple[tuple[int, ...], ...]
    host_of_rank: tuple[int, ...]
    host_index: int
    local_rank: int
    local_size: int
    n_hosts: int
    uniform: bool
    contiguous: bool

    @classmethod
    def from_keys(cls, keys: Sequence[Hashable], rank: int) -> Topology:
        """Group ranks by equal keys (``keys[r]`` is rank r's) as seen from ``rank``."""
        index: dict[Hashable, int] = {}
        of = tuple(index.setdefault(k, len(index)) for k in keys)
        hosts = tuple(tuple(r for r, h in enumerate(of) if h == i) for i in range(len(index)))
        mine = hosts[of[rank]]
        return cls(hosts, of, of[rank], mine.index(rank), len(mine), len(hosts),
                   len({len(h) for h in hosts}) == 1,
                   all(h[-1] - h[0] == len(h) - 1 for h in hosts))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Ranks per host, in host order."""
        return tuple(len(h) for h in self.hosts)


def topology(comm: Communicator, *, timeout: float | None = None) -> Topology:
    """The hosts of ``comm`` (collective on the first call, one small allgather bounded by
    ``timeout``; then cached on the communicator)."""
    if comm.cache.topology is None:
        refused: ValueError | None = None
        try:
            row = [0, *digest(host_key())]
        except ValueError as exc:  # told to every rank, so none waits for this one
            refused, row = exc, [1, 0, 0]
        table = comm.allgather_ints(row, collective="topology", timeout=timeout)
        bad = [r for r in range(comm.size) if table[r, 0]]
        if refused is not None:
            raise refused
        if bad:
            raise ValueError(f"the host of rank(s) {bad} cannot be told from their environment "
                             f"(a bad GROUP_RANK, RANK or LOCAL_RANK there: see the error on "
                             f"that rank); fix it, or name each rank's host group with {ENV}")
        comm.cache.topology = Topology.from_keys([tuple(row) for row in table[:, 1:].tolist()],
                                                 comm.rank)
    return comm.cache.topology


@dataclass(frozen=True)
class HostComms:
    """The sub-communicators of a two-level collective on one rank.

    ``intra``: the ranks of this rank's host, in rank order (local rank = its rank there).
    ``cross``: the ranks with this rank's local index on every host that has one, in rank
    order; on uniform hosts the cross-host step of every local index runs on its own one.
    """

    intra: Communicator
    cross: Communicator


def host_comms(comm: Communicator, *, timeout: float | None = None) -> HostComms:
    """The intra-host and cross-host sub-communicators of ``comm`` (collective on the first
    call: the topology, then two splits, each wait bounded by ``timeout``; then cached).

    Call it where every rank of ``comm`` calls it in the same order with respect to the
    other collectives on ``comm`` (as at the start of a collective): the splits are
    collectives on ``comm``.
    """
    cached = comm.cache.host_comms
    if cached is None:
        topo = topology(comm, timeout=timeout)
        intra = split_by(comm, topo.host_index, comm.rank, label="intra-host",
                         timeout=timeout)
        cross = split_by(comm, topo.local_rank, comm.rank, label="cross-host",
                         timeout=timeout)
        assert intra is not None and cross is not None  # every rank passed a color
        cached = comm.cache.host_comms = HostComms(intra, cross)
    return cached

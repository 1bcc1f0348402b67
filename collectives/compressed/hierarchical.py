"""Two-level compressed allreduce: only what crosses hosts is compressed.

On H hosts of L ranks the buffer is cut into L shards (sizes differ by at most one element).
A ring reduce-scatter inside each host, in the buffer's own precision, leaves local rank i
with shard i summed over its host; each local rank then runs the compressed scheme on its own
shard across hosts, on the cross-host communicator of its local index (the L of them in
parallel), and a ring allgather inside the host puts the shards back together. Error feedback
is keyed ``f"{name}@shard{i}"``: the residual of what this rank sent, kept by the rank that
sends it (the reduce-scatter/allgather scheme's owner-side residual under
``f"{name}@shard{i}@owner"``); a pipelined call (a payload of 2 MB or more, in chunks as the
dense two-level allreduce has them) keeps one per chunk, ``f"{name}@shard{i}/{k}"``. Every
rank of a cross-host communicator ends with the same bits of its shard (each scheme promises
it) and the allgather only copies them, so every rank ends with identical bits.

Each rank encodes and decodes only its shard (1/L of the flat call's codec work), and only
the shard's payload crosses hosts: ``price`` charges the intra-host steps to the intra class
and the scheme on the shard to the cross class, ``wire_bytes`` counts each level's bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from compressors import Compressor

from .. import costmodel, ops
from ..algorithms import ring, two_level
from ..algorithms.common import Job, Steps, partition
from ..buffers import Prepared
from ..config import defaults
from ..costmodel import SchemeLoad
from ..costparams import CostParams, several_per_host
from ..progress import Handle
from ..topology import host_comms, topology
from ..transport.base import Communicator
from . import SCHEMES, candidates, rsag
from .compression import Compression
from .select import choose, measure
from .views import input_view, store


@dataclass(frozen=True)
class Levels:
    """Where a two-level call runs on one rank: ``intra`` (None with one rank per host),
    ``cross`` (None on one host: nothing crosses hosts), its local index and the hosts."""

    intra: Communicator | None
    cross: Communicator | None
    local_rank: int
    local_size: int
    n_hosts: int


def levels(c: Communicator, hierarchy: str, comp: Compressor, timeout: float | None,
           numel: int | None = None, value_bytes: int = 4, scheme: str = "auto",
           schemes: list[str] | None = None) -> Levels | None:
    """The levels of a call with ``hierarchy``, or None for a flat call (collective on the
    communicator's first call: the topology, then the sub-communicators, each wait bounded by
    ``timeout``). "auto" is two-level on several hosts of the same size, more than one rank
    each, for compressors that take flat slices, where the cost model prices it below the
    flat call (``pays``) for a call of ``numel`` elements (None: not priced)."""
    if hierarchy == "flat" or c.size == 1:
        return None
    topo = topology(c, timeout=timeout)
    if hierarchy == "auto" and not (several_per_host(topo.sizes)
                                    and not comp.capabilities.allreduce_steps):
        return None
    if hierarchy == "auto" and numel is not None and not pays(
            c, comp, numel, value_bytes, [scheme] if scheme != "auto" else schemes or [],
            timeout):
        return None
    if not topo.uniform:
        raise ValueError(f"hierarchy='two_level' needs hosts of the same size (shards line up "
                         f"across hosts), but the hosts hold {list(topo.sizes)} ranks; use "
                         "hierarchy='flat' (or 'auto', which is flat there)")
    if topo.n_hosts == 1:
        return Levels(c, None, topo.local_rank, topo.local_size, 1)
    if topo.n_hosts == c.size:
        return Levels(None, c, 0, 1, c.size)
    subs = host_comms(c, timeout=timeout)
    return Levels(subs.intra, subs.cross, topo.local_rank, topo.local_size, topo.n_hosts)


def pays(c: Communicator, comp: Compressor, numel: int, value_bytes: int,
         schemes: list[str], timeout: float | None) -> bool:
    """Whether the cost model fitted on ``c`` (its intra- and cross-host classes) prices the
    two-level call of ``numel`` elements below the flat one, each with its cheapest of
    ``schemes`` (collective on first use: the fit and the compressor's speed; then the same
    answer on every rank). Inside the host the two-level call moves the whole buffer in full
    precision: a sparse payload, or a host link no faster than the network, can make the
    flat call cheaper."""
    if not schemes:
        return True
    cost = costmodel.params(c, timeout=timeout)
    # Priced once per compressor and size (a DDP bucket asks every step), kept with the fit
    # it was priced on: a new fit is a new object and prices again.
    key = (comp, numel, value_bytes, tuple(schemes))
    known = c.cache.two_level_pays.get(key)
    if known is not None and known[0] is cost:
        return known[1]
    cs, ds, per_elem, kept = measure(c, comp)
    payload, k = int(per_elem * numel), int(kept * numel)
    n_bytes = numel * value_bytes
    answer = cheaper(SchemeLoad(c.size, numel, value_bytes, payload, cs * n_bytes,
                                ds * n_bytes, k), cost, schemes)
    if len(c.cache.two_level_pays) >= 4096:  # layouts come and go: keep it bounded
        c.cache.two_level_pays.clear()
    c.cache.two_level_pays[key] = (cost, answer)
    return answer


def cheaper(load: SchemeLoad, c: CostParams, schemes: list[str]) -> bool:
    """Whether the two-level call of ``load`` on the hosts ``c.layout(load.p)`` is priced
    below the flat one, each with its cheapest of ``schemes``.

    Example (2 hosts of 2 ranks, shared memory inside, 1 Gbit/s across; 16M floats in 8
    bits, 20 ms to encode and 10 to decode them all: two-level codes 1/L of it)::

        >>> from collectives.costparams import CostParams, Link
        >>> from collectives.costmodel import SchemeLoad
        >>> c = CostParams.of_hosts(Link(2e-6, 1e-10), Link(30e-6, 8e-9), 1e-10, (2, 2))
        >>> cheaper(SchemeLoad(4, 1 << 24, 4, 1 << 24, 0.02, 0.01), c,
        ...         ["reduce_scatter_allgather"])
        True
    """
    flat = min(sum(SCHEMES[s].price(load, c)) for s in schemes)
    two = min(sum(price(s, load, c)) for s in schemes)
    return two < flat


def _decide(c: Communicator, lv: Levels, call: Compression, numel: int, value_bytes: int,
            algorithm: str, timeout: float | None) -> tuple[str, str]:
    """The cross-host step's scheme and dense algorithm, decided before the first message,
    alike on every rank (priced for the largest shard on the cross class). Its sparse
    algorithm, decided on the payload, reads the cross class kept on the sub-communicator."""
    comp, scheme = call.compressor, call.scheme
    if algorithm == "two_level":  # with one rank per host, two_level is its cross step
        algorithm = two_level.CROSS
    if "auto" in (scheme, algorithm, call.sparse_algorithm):
        cost = costmodel.params(c, timeout=timeout)
        if lv.cross is not c:
            cost = costmodel.level_params(lv.cross, cost, "cross")  # type: ignore[arg-type]
        shard = -(-numel // lv.local_size)
        if scheme == "auto":
            scheme = choose(c, comp, shard, value_bytes, candidates(comp), p=lv.n_hosts,
                            cost=cost)
        if algorithm == "auto":
            payload = int(measure(c, comp)[2] * shard)
            algorithm = costmodel.predicted_best(lv.n_hosts, payload, cost)
    return scheme, algorithm


def start(c: Communicator, lv: Levels, prepared: Prepared, call: Compression, op: str,
          algorithm: str, timeout: float | None) -> Handle:
    """Start the two-level call of ``call`` on ``prepared`` (see the module's docstring).

    On several hosts of several ranks a large buffer is pipelined as the dense two-level
    allreduce is (``pieces`` chunks, on an engine that matches by tag): chunk k's
    shard crosses hosts compressed while the host allgathers chunk k-1 and reduce-scatters
    chunk k+1. Each chunk's shard keeps its residual under ``f"{name}@shard{i}/{k}"``."""
    dtype, work, comp, scheme = prepared.dtype, prepared.work, call.compressor, call.scheme
    prepared.load()  # the reduce-scatter sums in place, in the output buffer
    ops.prescale(work, dtype, op, c.size)  # fp16/bf16 average: divide first
    both = lv.intra is not None and lv.cross is not None and c.matches_by_tag
    chunks = partition(work.size, pieces(comp.capabilities.sparse, work.nbytes,
                                         comp.payload_nbytes(work.size, dtype.name))
                       if both else 1)
    if lv.cross is not None:  # decided for a chunk's shard
        scheme, algorithm = _decide(c, lv, call, chunks[0][1], dtype.itemsize, algorithm,
                                    timeout)
    local = [partition(hi - lo, lv.local_size) for lo, hi in chunks]
    # each chunk's tag, and the tags of its reduce_scatter_allgather segments, drawn now, as
    # many on every rank (the scheme starts midway through the call, when ranks are out of
    # step)
    tags = [c.next_tag() for _ in chunks]
    spare = [[c.next_tag() for _ in range(rsag.MAX_SEGMENTS - 1)] for _ in chunks]
    seg = max(1, defaults.segment_bytes // dtype.itemsize)
    inners: list[Any] = []
    direct: list[bool] = []  # whether a chunk's shard takes the sum in place
    if lv.cross is not None:
        for k, (lo, _) in enumerate(chunks):
            a, b = local[k][lv.local_rank]
            key = f"{call.key}@shard{lv.local_rank}" + (f"/{k}" if len(chunks) > 1 else "")
            inner = call.at(name=key).ctx(lv.cross, tags[k],
                                          input_view(work[lo + a:lo + b], dtype, (b - a,)),
                                          dtype, algorithm)
            inner.tags = spare[k]
            # every scheme reads its input before writing the sum: the shard may take it
            direct.append(work.dtype == inner.acc)
            inner.out = work[lo + a:lo + b] if direct[-1] else inner.buffer("result", b - a)
            inners.append(inner)
    sent, crossed = c.bytes_sent, 0 if lv.cross is None else lv.cross.bytes_sent

    def inside(k: int, part: two_level.HostStep) -> Steps:
        if lv.intra is not None:
            lo, hi = chunks[k]
            yield from part(Job(lv.intra, work[lo:hi], dtype, "sum", tags[k], seg,
                                "two-level compressed allreduce"), local[k])

    def across(k: int) -> Steps:
        if inners:
            inner = inners[k]
            yield from SCHEMES[scheme].run(inner)
            lo, (a, b) = chunks[k][0], local[k][lv.local_rank]
            if not direct[k]:
                store(inner.out, work[lo + a:lo + b], dtype)

    def finish() -> Any:
        ops.finish(work, dtype, op, c.size)  # fp32/fp64 average: divide after
        if call.stats is not None:
            coded = {key: sum(inner.stats[key] for inner in inners)
                     for key in ("compress_s", "decompress_s")}
            call.stats.update(coded, scheme=scheme if inners else None,
                         hierarchy="two_level", bytes_sent=c.bytes_sent - sent,
                         cross_bytes_sent=0 if lv.cross is None
                         else lv.cross.bytes_sent - crossed)
        return prepared.finish()

    return Handle(two_level.pipeline(len(chunks), inside, across), finish,
                  f"compressed allreduce[two_level, {scheme}]", timeout)


def pieces(sparse: bool, nbytes: float, payload_bytes: float | None = None) -> int:
    """Chunks a two-level call of ``nbytes`` is pipelined in: as the dense two-level
    allreduce, on the bytes of its payload (``payload_bytes``, where the compressor knows it
    before the data), which are what cross hosts: a chunk's crossing is then as long as a
    dense chunk's, and the host's full-precision steps of a small payload are not cut into
    rounds that only add latency (on 2 x 2 emulated ranks at 1 Gbit/s, 7 MB float32: fp16
    took 36 ms in 3 chunks against 41 ms in one, 8 bits 31 ms in one against 36 ms in 7).
    One for a ``sparse`` payload, which crosses in a few milliseconds (on 2 x 4 ranks,
    64 MB: top-k 1% took 170 ms in 8 chunks against 120 to 155 ms in one)."""
    if sparse:
        return 1
    return two_level.pieces(nbytes if payload_bytes is None else payload_bytes)


def price(scheme: str, load: SchemeLoad, c: CostParams) -> tuple[float, float]:
    """(communication, codec) seconds on the hosts ``c.layout(load.p)`` (H hosts of L ranks):
    the ring reduce-scatter and allgather of all n bytes inside the host on the intra class,
    2(L-1) ceil(n/(L s)) a_i + 2(L-1)/L n b_i + (L-1)/L n g, plus the scheme's price of one
    shard (n/L elements, payload/L bytes, k/L entries, 1/L of the coding) over H ranks on the
    cross class. Pipelined in m = ``pieces(sparse, n)`` chunks, with I and X those two
    communication terms for one chunk, I + 2 max(X, I/2) + (m-2) max(X, I) (the dense
    two-level call's form), the coding all of it. On one host nothing is coded and nothing
    crosses."""
    sizes = c.layout(load.p)
    hosts, local = len(sizes), sizes[0]
    if len(set(sizes)) > 1:
        raise ValueError(f"a two-level compressed allreduce needs hosts of the same size, "
                         f"not {list(sizes)}")
    sparse = 0 < load.sparse_k < load.numel  # (a dense payload keeps every element)
    m = pieces(sparse, load.n_bytes, load.payload_bytes) if hosts > 1 and local > 1 else 1
    inside = costmodel.predict("ring", local, load.n_bytes / m, c.on("intra", (local,)),
                               load.segment)
    if hosts == 1:
        return inside, 0.0
    part = local * m
    shard = replace(load, p=hosts, numel=math.ceil(load.numel / part),
                    payload_bytes=math.ceil(load.payload_bytes / part),
                    encode_s=load.encode_s / part, decode_s=load.decode_s / part,
                    sparse_k=math.ceil(load.sparse_k / part))
    comm, codec = SCHEMES[scheme].price(shard, c.on("cross", (1,) * hosts))
    if m == 1:
        return inside + comm, codec
    return inside + 2 * max(comm, inside / 2) + (m - 2) * max(comm, inside), m * codec


def wire_bytes(scheme: str, hosts: int, local: int, nbytes: int, shard_payload_bytes: int,
               entries: int = 0, entry_bytes: int = 8) -> tuple[float, float]:
    """(inside, across) bytes one rank sends: the ring's 2(L-1)/L n inside its host, and the
    scheme's bytes for its shard's payload (``entries`` of them for a sparse one) across the
    H hosts (the scheme's ``wire_bytes`` at p = H)."""
    inside = ring.wire_bytes(local, nbytes) if local > 1 else 0.0
    across = SCHEMES[scheme].wire_bytes(hosts, shard_payload_bytes, entries, entry_bytes) \
        if hosts > 1 else 0.0
    return inside, across

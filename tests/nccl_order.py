"""An in-process world of ranks (one thread each) whose messages follow NCCL's ordering rules.

ProcessGroupNCCL runs the point-to-point operations between two ranks on one stream of each,
in the order they were posted, and ignores tags:

* the k-th send from rank a to rank b carries the k-th receive of b from a (sizes must agree);
* an operation runs only once everything posted before it on its pair's stream has finished,
  and a send and its receive move together when both have reached the head of their streams.
  So a receive posted alone ahead of a send to the same peer blocks that send, on both ranks:
  two ranks that each post [recv, send] wait on each other for ever;
* operations posted inside ``grouped()`` (``batch_isend_irecv``) are launched together: the
  group's operations with one peer form one unit on that pair's stream, all of it running at
  once, and a request of the group completes when the whole group on that rank has.

Collective calls (``iallgather_ints``, ``native_iallreduce``) meet on a stream of their own.
Nothing blocks the posting thread; a request that can never complete makes every rank's wait
raise ``TransportError`` naming each stream's head, once no message has moved anywhere for
``stall`` seconds (a hang fails a test in seconds instead of at its deadline).

``World(p, ordered=False)`` matches the same way with no stream rule (every posted operation
may move at once): the reference a run under the rules must equal bit for bit.

Example::

    >>> world = World(3)
    >>> outs = world.run(lambda comm: collectives.allreduce(np.ones(5), comm=comm))
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectives.errors import TransportError
from collectives.topology import Topology
from collectives.transport.base import Communicator, Request


@dataclass(eq=False)
class _Op:
    kind: str  # "send" or "recv"
    me: int
    peer: int
    buf: np.ndarray  # flat uint8 view
    unit: _Unit | None = None
    done: bool = False


@dataclass(eq=False)
class _Unit:
    """Operations of one rank with one peer that run together (one op, or a group's)."""

    ops: list[_Op] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(op.done for op in self.ops)


class Fabric:
    """What the ranks of one world (or one sub-communicator of it) share."""

    def __init__(self, size: int, ordered: bool, stall: float, root: Fabric | None = None):
        self.size, self.ordered, self.stall = size, ordered, stall
        self.root = root or self
        pairs = [(a, b) for a in range(size) for b in range(size) if a != b]
        self.streams: dict[tuple[int, int], deque[_Unit]] = {k: deque() for k in pairs}
        self.sends: dict[tuple[int, int], deque[_Op]] = {k: deque() for k in pairs}
        self.recvs: dict[tuple[int, int], deque[_Op]] = {k: deque() for k in pairs}
        self.slots: dict[int, dict[int, Any]] = {}  # collective calls by sequence number
        self.children: dict[tuple, Fabric] = {}
        self.error: str | None = None
        if root is None:
            self.cond = threading.Condition()
            self.last_move = time.monotonic()
            self.messages = 0

    def post(self, units: list[_Unit]) -> None:
        with self.root.cond:
            for unit in units:
                for op in unit.ops:
                    op.unit = unit
                    src, dst = (op.me, op.peer) if op.kind == "send" else (op.peer, op.me)
                    (self.sends if op.kind == "send" else self.recvs)[(src, dst)].append(op)
                self.streams[(unit.ops[0].me, unit.ops[0].peer)].append(unit)
            self.progress()

    def _active(self, op: _Op) -> bool:
        if not self.ordered:
            return True
        stream = self.streams[(op.me, op.peer)]
        while stream and stream[0].done:
            stream.popleft()
        return bool(stream) and stream[0] is op.unit

    def progress(self) -> None:
        """Move every message that may move (the root's lock held)."""
        moved = True
        while moved:
            moved = False
            for key, sends in self.sends.items():
                recvs = self.recvs[key]
                while sends and recvs and self._active(sends[0]) and self._active(recvs[0]):
                    s, r = sends.popleft(), recvs.popleft()
                    if s.buf.size != r.buf.size:
                        self.error = (f"rank {s.me}'s send of {s.buf.size} B to rank {s.peer} "
                                      f"met rank {r.me}'s receive of {r.buf.size} B (messages "
                                      "between two ranks match in posting order)")
                    else:
                        r.buf[:] = s.buf
                    s.done = r.done = moved = True
                    self.root.last_move = time.monotonic()
                    self.root.messages += 1
        for stream in self.streams.values():
            while stream and stream[0].done:
                stream.popleft()

    def heads(self) -> str:
        """Each blocked stream's first operation, for the stall message."""
        lines = []
        for (a, b), stream in self.streams.items():
            if stream:
                kinds = ",".join(op.kind for op in stream[0].ops if not op.done)
                lines.append(f"rank {a}->{b}: [{kinds}] first, {len(stream)} units queued")
        return "; ".join(lines)


class _PairRequest(Request):
    def __init__(self, comm: OrderedComm, ops: list[_Op], peer: int, what: str) -> None:
        super().__init__(peer, what)
        self.comm, self.ops = comm, ops  # the op, or its whole group's ops
        self.launched = False
        self._done = False

    def test(self) -> bool:
        fab = self.comm.fabric
        with fab.root.cond:
            if not self.launched:
                return False
            fab.progress()
            if fab.error:
                raise TransportError(fab.error)
            if all(op.done for op in self.ops):
                self._done = True
                return True
            if time.monotonic() - fab.root.last_move > fab.stall:
                raise TransportError(f"no message moved for {fab.stall} s while rank "
                                     f"{self.comm.rank} waits on {self.what}: "
                                     f"{fab.heads()}")
        return False


class _SlotRequest(Request):
    """A collective call: complete once every rank has made its call of the same number."""

    def __init__(self, comm: OrderedComm, seq: int, finish: Callable[[list[Any]], None],
                 what: str) -> None:
        super().__init__(None, what)
        self.comm, self.seq, self.finish = comm, seq, finish
        self._done = False

    def test(self) -> bool:
        fab = self.comm.fabric
        with fab.root.cond:
            slot = fab.slots[self.seq]
            if len(slot) < fab.size:
                if time.monotonic() - fab.root.last_move > fab.stall:
                    raise TransportError(f"no rank moved for {fab.stall} s while rank "
                                         f"{self.comm.rank} waits in {self.what}")
                return False
            fab.root.last_move = time.monotonic()
        if not getattr(self, "_done", False):
            self.finish([slot[r] for r in range(fab.size)])
            self._done = True
        return True


class OrderedComm(Communicator):
    """One rank of a ``Fabric``; ``hosts``: each rank's host index (for two-level runs)."""

    engine = "nccl-order"

    def __init__(self, fabric: Fabric, rank: int, hosts: list[int] | None = None) -> None:
        super().__init__()
        self.fabric, self._rank, self._size = fabric, rank, fabric.size
        self.matches_by_tag = False
        self.orders_pairs = fabric.ordered
        self._group: list[_Op] | None = None
        self._calls = 0
        self._splits = 0
        if hosts is not None:
            self.cache.topology = Topology.from_keys(hosts, rank)

    @contextmanager
    def grouped(self) -> Iterator[None]:  # type: ignore[override]
        if self._group is not None or not self.orders_pairs:
            yield
            return
        self._group, requests = [], []
        self._group_requests = requests
        try:
            yield
        finally:
            ops, self._group = self._group, None
            units: dict[int, _Unit] = {}
            for op in ops:
                units.setdefault(op.peer, _Unit()).ops.append(op)
            for req in requests:
                req.ops, req.launched = ops, True
            if units:
                self.fabric.post(list(units.values()))

    def _p2p(self, kind: str, buf: np.ndarray, peer: int, what: str) -> Request:
        self.check_usable()
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"rank {self._rank} cannot {kind} to/from rank {peer}")
        op = _Op(kind, self._rank, peer, np.ascontiguousarray(buf).reshape(-1).view(np.uint8))
        req = _PairRequest(self, [op], peer, what)
        if self._group is not None:
            self._group.append(op)
            self._group_requests.append(req)
        else:
            req.launched = True
            self.fabric.post([_Unit([op])])
        return self._track(req)

    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> Request:
        self._count_sent(buf.nbytes)
        return self._p2p("send", buf, dest, what)

    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> Request:
        return self._p2p("recv", buf, source, what)

    def _collective(self, mine: Any, finish: Callable[[list[Any]], None],
                    what: str) -> Request:
        self.check_usable()
        self._calls += 1
        fab = self.fabric
        with fab.root.cond:
            fab.slots.setdefault(self._calls, {})[self._rank] = mine
        return self._track(_SlotRequest(self, self._calls, finish, what))

    def iallgather_bytes(self, data: np.ndarray, out: np.ndarray) -> Request | None:
        """The engine's allgather of equal blocks, as NCCL's ``all_gather_into_tensor``
        (the transport without the rules offers none: the reference runs point to point)."""
        if not self.orders_pairs:
            return None
        self._count_sent((self._size - 1) * data.nbytes)

        def finish(blocks: list[Any]) -> None:
            out.reshape(-1).view(np.uint8)[:] = np.concatenate(blocks)

        return self._collective(np.ascontiguousarray(data).reshape(-1).view(np.uint8).copy(),
                                finish, "allgather of payloads")

    def iallgather_ints(self, values: np.ndarray, out: np.ndarray) -> Request:
        def finish(rows: list[Any]) -> None:
            out.reshape(self._size, -1)[:] = np.stack(rows)

        return self._collective(np.array(values, np.int64).reshape(-1), finish,
                                "allgather of metadata")

    def _split(self, color: int | None, key: int, groups: list[list[int]],
               timeout: float | None) -> OrderedComm | None:
        self._splits += 1
        mine = None
        with self.fabric.root.cond:
            for index, ranks in enumerate(groups):
                child = self.fabric.children.setdefault(
                    (self._splits, index),
                    Fabric(len(ranks), self.fabric.ordered, self.fabric.stall, self.fabric.root))
                if self._rank in ranks:
                    mine = OrderedComm(child, ranks.index(self._rank))
        return mine


class World:
    """``p`` ranks in threads of this process on one ``Fabric``."""

    def __init__(self, p: int, *, ordered: bool = True, stall: float = 5.0,
                 hosts: list[int] | None = None) -> None:
        self.fabric = Fabric(p, ordered, stall)
        self.comms = [OrderedComm(self.fabric, r, hosts) for r in range(p)]

    def run(self, fn: Callable[[OrderedComm], Any], timeout: float = 120.0) -> list[Any]:
        """``fn(comm)`` on every rank at once; each rank's result, or the error that came
        first raised again here (the others' are often its consequence: a stall)."""
        results: list[Any] = [None] * len(self.comms)
        errors: list[tuple[float, BaseException]] = []

        def body(r: int) -> None:
            try:
                results[r] = fn(self.comms[r])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                errors.append((time.monotonic(), exc))

        threads = [threading.Thread(target=body, args=(r,), daemon=True)
                   for r in range(len(self.comms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        if any(t.is_alive() for t in threads):
            raise TimeoutError(f"ranks still running after {timeout} s")
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        return results

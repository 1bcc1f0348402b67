"""The transport interface every algorithm is written on.

Algorithms never call mpi4py or torch.distributed directly: they post nonblocking sends and
receives of contiguous host byte buffers through a ``Communicator`` and wait on the returned
``Request`` objects with a deadline. Two engines implement it (MPI and torch.distributed).

What other modules keep per communicator between calls lives in its ``cache``, a
``CommCache`` with one typed slot per use; nothing else is set on a communicator from outside.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Generator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..agreement import check, message
from ..config import check_timeout
from ..errors import CommunicationError, CommunicatorUnusable, TransportError
from .waiting import poll_settings, test_all, wait_all

if TYPE_CHECKING:
    from ..costparams import CostParams


class Request(ABC):
    """A pending point-to-point or collective operation.

    ``peer`` and ``what`` describe it for error messages (who we were waiting for, and why).
    """

    def __init__(self, peer: int | None, what: str, owner: Communicator | None = None) -> None:
        self.peer = peer
        self.what = what
        #: the communicator that posted it (a failed wait makes that communicator unusable)
        self.owner = owner

    #: True for engines whose requests only complete inside a blocking wait (gloo p2p)
    blocking: bool = False

    @property
    def seen_done(self) -> bool:
        """True once a ``test`` or wait of this request saw it complete (a remembered answer:
        no engine call). Requests that remember no such answer say False."""
        return False

    @abstractmethod
    def test(self) -> bool:
        """Drive progress once; True when the operation has completed."""

    def block(self, seconds: float) -> bool:
        """Blocking wait of at most ``seconds``; True if completed (engines with blocking=True)."""
        return self.test()


#: An algorithm run as a generator: it posts nonblocking sends and receives and yields the
#: requests it must see complete before it goes on (``collectives.progress`` drives it).
Steps = Generator[list[Request], None, None]


@dataclass
class CommCache:
    """What compcoll keeps on a communicator between calls (``comm.cache``), one slot per use.

    Example::

        >>> import collectives
        >>> from mpi4py import MPI
        >>> c = collectives.as_communicator(MPI.COMM_WORLD)
        >>> assert c.cache.engine_object is MPI.COMM_WORLD  # as_communicator's wrapper
    """

    #: the cost model's fitted alpha/beta/gamma; ``costmodel.params`` probes on first use
    cost_params: CostParams | None = None
    #: the measured crossover table "auto" picks by (``collectives.tuning``), and whether a
    #: saved one was looked for
    crossovers: Any = None
    crossovers_looked_up: bool = False
    #: whether the ranks have compared their message-shaping settings
    #: (``collectives.validation.settle``)
    settings_agreed: bool = False
    #: reusable host arrays of the compressed schemes, by (role, ...) key
    #: (``collectives.compressed.common.workspace``)
    workspace: dict = field(default_factory=dict)
    #: the same for device codecs' buffers (``collectives.compressed.ondevice``)
    device_workspace: dict = field(default_factory=dict)
    #: the routes of compressed calls, by their kind (``collectives.core.route``)
    routes: dict = field(default_factory=dict)
    #: each compressor's measured speed and payload size, for scheme="auto"
    #: (``collectives.compressed.select.measure``)
    compressor_speed: dict = field(default_factory=dict)
    #: the engine object ``as_communicator`` wrapped: an MPI communicator kept alive while the
    #: wrapper is cached (its id() cannot be reused by another object), a torch.distributed
    #: group through a weak reference (destroy_process_group must free it)
    engine_object: Any = None
    #: which ranks share a host, agreed on first use (``collectives.topology.topology``)
    topology: Any = None
    #: the intra-host and cross-host sub-communicators, split once
    #: (``collectives.topology.host_comms``)
    host_comms: Any = None
    #: whether a two-level compressed call pays, by (compressor, size, schemes), with the
    #: fit it was priced on
    #: (``collectives.compressed.hierarchical.pays``)
    two_level_pays: dict = field(default_factory=dict)


class Communicator(ABC):
    """A group of ranks and the point-to-point primitives compcoll's algorithms need.

    Subclasses: ``MPICommunicator`` (mpi4py), ``TorchCommunicator`` (torch.distributed).
    Every buffer passed here is a C-contiguous numpy array on the host (or, for engines that
    accept them, a device array with ``__cuda_array_interface__``); it is sent as raw bytes.

    Example::

        >>> import collectives
        >>> from mpi4py import MPI
        >>> c = collectives.as_communicator(MPI.COMM_WORLD)
        >>> assert (c.rank, c.size) == (MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size)
    """

    #: short engine name, e.g. "mpi" or "torch"
    engine: str = "abstract"
    #: whether messages are matched by tag; where not (NCCL), messages between two ranks match
    #: in the order they were posted, so nothing may interleave two message streams
    matches_by_tag: bool = True
    #: whether a pair's sends and receives run in posting order on one stream (NCCL): a
    #: receive posted alone blocks the send posted after it to the same peer, so a rank that
    #: both sends to and receives from a peer must post the two inside ``grouped()``
    orders_pairs: bool = False

    def __init__(self) -> None:
        poll_settings()  # a bad COMPCOLL_POLL_* is refused here, before any message
        self._seq = 0
        #: bytes this rank has handed to isend, here and on the communicators split from this
        #: one (benchmarks read it to report traffic)
        self.bytes_sent = 0
        #: the error that made this communicator unusable (None while it is usable)
        self.failure: CommunicationError | None = None
        # Requests posted here and not yet seen complete (pruned now and then): the engine may
        # write into their buffers until they complete, so they are never let go before that.
        self._posted: list[Request] = []
        self._prune_at = 64
        self._lock = threading.Lock()  # a DDP hook posts while its thread waits
        #: state other modules keep per communicator between calls (cost model fit, ...)
        self.cache = CommCache()
        #: a sub-communicator's origin (``transport.split.split_by``): the communicator it was
        #: split from, each of its ranks' rank there, and what it links ("intra-host"); None,
        #: None and "" for a communicator the caller passed
        self.parent: Communicator | None = None
        self.parent_ranks: tuple[int, ...] | None = None
        self.label = ""

    # -- failure: once a wait gives up, every later call refuses ------------------------------
    def check_usable(self) -> None:
        """Raise CommunicatorUnusable if an earlier wait on this communicator, or on the one
        it was split from, failed."""
        comm: Communicator | None = self
        while comm is not None:
            if comm.failure is not None:
                raise CommunicatorUnusable(repr(self), comm.failure)
            comm = comm.parent

    def fail(self, cause: CommunicationError) -> None:
        """Mark the communicator unusable after ``cause`` (a timeout or an engine error).

        Every request still in flight is kept, with its buffers, for the life of the
        communicator: the engine may still write a late peer's message into a receive buffer,
        and freeing that buffer would corrupt the heap. Later calls raise CommunicatorUnusable.
        """
        if self.failure is None:
            self.failure = cause  # ``_posted`` is not pruned from now on: it keeps them all
        if self.parent is not None:  # its collectives ran here: their sequence is broken too
            self.parent.fail(cause)

    def _engine_error(self, message: str, exc: BaseException) -> TransportError:
        """A TransportError for an engine call that failed; the communicator is unusable after
        it (requests posted before it in the same collective are abandoned)."""
        error = TransportError(f"{message}: {exc}")
        error.__cause__ = exc
        self.fail(error)
        return error

    def _count_sent(self, nbytes: int) -> None:
        """Count bytes handed to isend, here and on the communicator this one was split from
        (its collectives are parts of collectives there)."""
        comm: Communicator | None = self
        while comm is not None:
            comm.bytes_sent += nbytes
            comm = comm.parent

    def _track(self, request: Request) -> Request:
        """Register a request just posted on this communicator (see ``fail``)."""
        request.owner = self
        if self.parent_ranks is not None:  # name the peer as the caller's communicator does
            if request.peer is not None:
                request.peer = self.parent_ranks[request.peer]
            request.what = f"{self.label} {request.what}"
        with self._lock:
            self._posted.append(request)
            if len(self._posted) >= self._prune_at and self.failure is None:
                # only what a wait or test already saw complete: no engine call from here
                self._posted = [r for r in self._posted if not r.seen_done]
                self._prune_at = 2 * len(self._posted) + 64  # amortized O(1) per request
        return request

    @property
    def rank(self) -> int:
        """This process's rank in the group (``_rank``, set by the engine's subclass)."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks in the group (``_size``, set by the engine's subclass)."""
        return self._size

    @abstractmethod
    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> Request:
        """Start sending ``buf``'s bytes to ``dest``."""

    @abstractmethod
    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> Request:
        """Start receiving exactly ``buf.nbytes`` bytes from ``source`` into ``buf``."""

    def grouped(self) -> AbstractContextManager[None]:
        """A context inside which sends and receives are posted as one group.

        Algorithms post every exchange with a peer (a send to it and a receive from it in the
        same round) inside one group. Engines that progress each message on its own (MPI,
        gloo) post at once and this does nothing; engines with ``orders_pairs`` (NCCL) launch
        the group's operations together when the context exits (``batch_isend_irecv``), and a
        request of the group completes with the whole group.

        Example::

            >>> with comm.grouped():
            ...     reqs = [comm.irecv(theirs, peer, tag), comm.isend(mine, peer, tag)]
        """
        return nullcontext()

    def iallgather_bytes(self, data: np.ndarray, out: np.ndarray) -> Request | None:
        """Start the engine's own allgather of one equal-size byte block per rank into
        ``out`` (``size * data.nbytes`` bytes, rank order), or None where the engine offers
        none that compcoll uses. Pair-ordered engines (NCCL) take it for a round of
        equal-size parts: one collective instead of p - 1 grouped sends and receives."""
        return None

    @abstractmethod
    def iallgather_ints(self, values: np.ndarray, out: np.ndarray) -> Request:
        """Start gathering a small int64 vector from every rank into ``out[size, len]``."""

    def allgather_ints(self, values: Any, *, collective: str = "allgather_ints",
                       timeout: float | None = None) -> np.ndarray:
        """Gather a small int64 vector from every rank (metadata, validation); shape [size, n]."""
        check_timeout(timeout)
        self.check_usable()
        v = np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))
        out = np.empty((self.size, v.size), dtype=np.int64)
        wait_all([self.iallgather_ints(v, out)], collective=collective, timeout=timeout)
        return out

    def barrier(self, timeout: float | None = None) -> None:
        """Block until every rank has arrived (with a deadline).

        It sends the validation layout, so a rank in a barrier while another validates a
        collective makes both raise MismatchError instead of misreading each other."""
        table = self.allgather_ints(message("barrier", {}), collective="barrier (validation)",
                                    timeout=timeout)
        check(table, "barrier", {})

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 tag: int, *, collective: str = "sendrecv", timeout: float | None = None) -> None:
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in a ring)."""
        check_timeout(timeout)
        with self.grouped():
            reqs = [self.irecv(recvbuf, source, tag, "sendrecv"), self.isend(sendbuf, dest, tag)]
        wait_all(reqs, collective=collective, timeout=timeout)

    def split_agreed(self, color: int | None, key: int, groups: list[list[int]],
                     timeout: float | None) -> Communicator | None:
        """This rank's group of ``groups``, which every rank agreed on, split by the engine
        (None where ``color`` is None); :func:`transport.split.split_by` agrees on them first
        and checks the result: call that."""
        return self._split(color, key, groups, timeout)

    def _split(self, color: int | None, key: int, groups: list[list[int]],
               timeout: float | None) -> Communicator | None:
        """The engine's split (see ``transport.split.split_by``): ``groups`` lists every
        group's ranks, by color, each in rank order of the new communicator."""
        raise TypeError(f"{type(self).__name__} cannot be split into sub-communicators; "
                        "pass an mpi4py communicator or a torch.distributed group")

    def next_tag(self) -> int:
        """A tag for the next collective: every rank calls collectives in the same order, so
        the sequence agrees, and several collectives in flight never match each other's
        messages."""
        self._seq += 1
        return self._seq % self.max_tag

    max_tag: int = 32767

    def abort(self, code: int = 1) -> None:
        """Terminate every rank of the job (used when one rank fails)."""
        raise SystemExit(code)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank} of {self.size}>"


__all__ = ["CommCache", "Communicator", "Request", "Steps", "share_bytes", "test_all",
           "wait_all"]


def share_bytes(comm: Any, data: bytes | None, *, collective: str = "share_bytes",
                timeout: float | None = None) -> bytes | None:
    """Rank 0's ``data`` on every rank of ``comm`` (anything with ``rank`` and
    ``allgather_ints``; collective; None everywhere when rank 0 has none, the other ranks'
    ``data`` ignored). For small records: a file rank 0 read."""
    mine = len(data) if comm.rank == 0 and data is not None else 0
    n = int(comm.allgather_ints(np.array([mine]), collective=collective,
                                timeout=timeout)[0, 0])
    if n == 0:
        return None
    buf = np.zeros(-(-n // 8) * 8, dtype=np.uint8)
    if comm.rank == 0:
        buf[:n] = np.frombuffer(data, dtype=np.uint8)  # type: ignore[arg-type]
    table = comm.allgather_ints(buf.view(np.int64), collective=collective, timeout=timeout)
    return np.ascontiguousarray(np.asarray(table, dtype=np.int64)[0]).view(np.uint8)[:n] \
        .tobytes()

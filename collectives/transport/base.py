"""The transport interface every algorithm is written on.

Algorithms never call mpi4py or torch.distributed directly: they post nonblocking sends and
receives of contiguous host byte buffers through a ``Communicator`` and wait on the returned
``Request`` objects with a deadline. Two engines implement it (MPI and torch.distributed).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..config import defaults
from ..errors import CollectiveTimeout

# Polling: spin on the engine, then yield the core, then sleep with back-off (long waits).
_SPINS = int(os.environ.get("COMPCOLL_POLL_SPINS", 32))
_YIELDS = int(os.environ.get("COMPCOLL_POLL_YIELDS", 2000))


class Request(ABC):
    """A pending point-to-point or collective operation.

    ``peer`` and ``what`` describe it for error messages (who we were waiting for, and why).
    """

    def __init__(self, peer: int | None, what: str) -> None:
        self.peer = peer
        self.what = what

    #: True for engines whose requests only complete inside a blocking wait (gloo p2p)
    blocking: bool = False

    @abstractmethod
    def test(self) -> bool:
        """Drive progress once; True when the operation has completed."""

    def block(self, seconds: float) -> bool:
        """Blocking wait of at most ``seconds``; True if completed (engines with blocking=True)."""
        return self.test()


def wait_all(requests: list[Request], *, collective: str, timeout: float | None = None) -> None:
    """Wait for every request, raising CollectiveTimeout if one makes no progress in time.

    Polls with a short spin, then sched_yield (a peer rank sharing the core gets to run at
    once), then an exponential sleep back-off capped at 0.5 ms for long waits.
    """
    timeout = defaults.timeout if timeout is None else timeout
    pending = [r for r in requests if not r.test()]
    if not pending:
        return
    deadline = time.monotonic() + timeout
    spins, sleep = 0, 2e-6
    while pending:
        if pending[0].blocking:
            r = pending[0]
            if not r.block(max(deadline - time.monotonic(), 1e-3)):
                raise CollectiveTimeout(collective, r.what, r.peer, timeout)
            pending.pop(0)
            continue
        pending = [r for r in pending if not r.test()]
        if not pending:
            return
        spins += 1
        if spins % 16 == 0 and time.monotonic() > deadline:
            r = pending[0]
            raise CollectiveTimeout(collective, r.what, r.peer, timeout)
        if spins > _SPINS:
            if spins > _YIELDS:
                time.sleep(sleep)
                sleep = min(sleep * 2, 5e-4)
            else:
                os.sched_yield()  # lets a peer rank sharing this core run, without a timer


class Communicator(ABC):
    """A group of ranks and the point-to-point primitives compcoll's algorithms need.

    Subclasses: ``MPICommunicator`` (mpi4py), ``TorchCommunicator`` (torch.distributed).
    Every buffer passed here is a C-contiguous numpy array on the host (or, for engines that
    accept them, a device array with ``__cuda_array_interface__``); it is sent as raw bytes.
    """

    #: short engine name, e.g. "mpi" or "torch"
    engine: str = "abstract"
    #: whether messages are matched by tag; where not (NCCL), messages between two ranks match
    #: in the order they were posted, so nothing may interleave two message streams
    matches_by_tag: bool = True

    def __init__(self) -> None:
        self._seq = 0
        #: bytes this rank has handed to isend (benchmarks read it to report traffic)
        self.bytes_sent = 0

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in the group."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of ranks in the group."""

    @abstractmethod
    def isend(self, buf: np.ndarray, dest: int, tag: int, what: str = "send") -> Request:
        """Start sending ``buf``'s bytes to ``dest``."""

    @abstractmethod
    def irecv(self, buf: np.ndarray, source: int, tag: int, what: str = "recv") -> Request:
        """Start receiving exactly ``buf.nbytes`` bytes from ``source`` into ``buf``."""

    @abstractmethod
    def iallgather_ints(self, values: np.ndarray, out: np.ndarray) -> Request:
        """Start gathering a small int64 vector from every rank into ``out[size, len]``."""

    def allgather_ints(self, values: Any, *, collective: str = "allgather_ints",
                       timeout: float | None = None) -> np.ndarray:
        """Gather a small int64 vector from every rank (metadata, validation); shape [size, n]."""
        v = np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))
        out = np.empty((self.size, v.size), dtype=np.int64)
        wait_all([self.iallgather_ints(v, out)], collective=collective, timeout=timeout)
        return out

    def barrier(self, timeout: float | None = None) -> None:
        """Block until every rank has arrived (with a deadline)."""
        self.allgather_ints(np.zeros(1, dtype=np.int64), collective="barrier", timeout=timeout)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 tag: int, *, collective: str = "sendrecv", timeout: float | None = None) -> None:
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in a ring)."""
        reqs = [self.irecv(recvbuf, source, tag, "sendrecv"), self.isend(sendbuf, dest, tag)]
        wait_all(reqs, collective=collective, timeout=timeout)

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

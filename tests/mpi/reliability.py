"""Faults on every engine: a rank late past the deadline (asleep, or stopped with SIGSTOP).

Each round takes a fresh communicator; rank 1 arrives late to a collective; every rank, the late
one included, must see CollectiveTimeout from it, then CommunicatorUnusable from every later
call (blocking, nonblocking, validated or not, the timed-out handle itself). The survivors churn
the heap while the late rank's messages land in the receive buffers they abandoned: those must
stay alive. The job ends with a healthy collective on a new communicator.

Run: mpiexec -n P python tests/mpi/reliability.py ENGINE [ROUNDS]    (ENGINE: mpi | gloo)
     mpiexec -n P python tests/mpi/reliability.py kill-gloo
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

import collectives
from collectives import CollectiveTimeout, CommunicationError, TransportError
from collectives.errors import CommunicatorUnusable

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
LATE, T, DELAY = 1, 1.0, 2.0  # the late rank, every call's deadline, how late it comes
N = 1 << 18  # 1 MB of float32: large enough for rendezvous-size messages
mode = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
pids = WORLD.allgather(os.getpid())
ck = Checker(f"reliability {mode}")


def fresh(engine: str) -> Any:
    """A new communicator on every rank (collective over the world)."""
    if engine == "mpi":
        return collectives.as_communicator(WORLD.Dup())
    import torch.distributed as dist

    return collectives.as_communicator(dist.new_group(timeout=timedelta(seconds=60)))


def x() -> np.ndarray:
    return np.full(N, R + 1, np.float32)


# The call that meets the late rank, by round: each must raise CollectiveTimeout.
def _auto(c: Any) -> Any:  # the first "auto" call fits the cost model: within the deadline
    return collectives.allreduce(x(), comm=c, timeout=T, validate=False)


def _ring(c: Any) -> Any:
    return collectives.allreduce(x(), comm=c, algorithm="ring", timeout=T, validate=False)


def _validated(c: Any) -> Any:
    return collectives.allreduce(x(), comm=c, algorithm="tree", timeout=T, validate=True)


def _compressed(c: Any) -> Any:
    return collectives.allreduce(x(), comm=c, compressor="uniform:bits=8", algorithm="ring",
                                 timeout=T, validate=False)


def _barrier(c: Any) -> Any:
    return c.barrier(timeout=T)


FIRST: list[tuple[str, Callable[[Any], Any]]] = [
    ("auto allreduce, first call (cost-model fit)", _auto), ("ring allreduce", _ring),
    ("validated tree allreduce", _validated), ("compressed allreduce", _compressed),
    ("barrier", _barrier)]

# Every later call on the same communicator must raise CommunicatorUnusable at once.
LATER: list[tuple[str, Callable[[Any], Any]]] = [
    ("allreduce, validated", lambda c: collectives.allreduce(x(), comm=c, timeout=T)),
    ("allreduce, not validated", lambda c: collectives.allreduce(
        x(), comm=c, algorithm="rabenseifner", timeout=T, validate=False)),
    ("iallreduce", lambda c: collectives.iallreduce(x(), comm=c, algorithm="ring",
                                                    validate=False).wait()),
    ("compressed allreduce", lambda c: collectives.allreduce(
        x(), comm=c, compressor="topk:ratio=0.01", timeout=T)),
    ("broadcast", lambda c: collectives.broadcast(x(), comm=c, validate=False)),
    ("allgather", lambda c: collectives.allgather(x()[:5], comm=c)),
    ("sparse allreduce", lambda c: collectives.sparse_allreduce(
        np.array([R]), np.ones(1, np.float32), 8, comm=c)),
    ("barrier", lambda c: c.barrier()),
    ("allgather_ints", lambda c: c.allgather_ints([R])),
]


def churn(seconds: float) -> None:
    """Allocate and free while late messages arrive: a freed receive buffer shows up here."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        junk = [np.full(int(n), n, np.float32) for n in np.random.default_rng().integers(
            1, N, 16)]
        for a in junk:
            assert a[0] == a[-1] == a.size
        junk.clear()


def expect_unusable(what: str, fn: Callable[[], Any], cause: BaseException | None) -> None:
    """``fn`` must raise CommunicatorUnusable naming ``cause`` (None: any first error)."""
    try:
        fn()
    except CommunicatorUnusable as exc:
        if cause is not None:
            ck.check(exc.cause is cause and type(cause).__name__ in str(exc),
                     f"{what}: CommunicatorUnusable does not name the first error ({cause}): "
                     f"{exc}")
        ck.check("new communicator" in str(exc) and "Abort" in str(exc),
                 f"{what}: the error does not say what to do: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - any other outcome is the failure reported
        ck.check(False, f"{what}: raised {type(exc).__name__} instead of "
                        f"CommunicatorUnusable: {exc}")
        return
    ck.check(False, f"{what}: completed on a communicator that had failed")


def one_round(engine: str, k: int) -> None:
    c = fresh(engine)
    name, first = FIRST[k % len(FIRST)]
    stop = k % 2 == 1  # odd rounds: rank 0 stops the late rank instead of it sleeping
    WORLD.Barrier()
    t0 = time.monotonic()
    if stop and R == 0:
        os.kill(pids[LATE], signal.SIGSTOP)
    elif R == LATE and not stop:
        time.sleep(DELAY)
    handle, error = None, None
    try:
        if name == "ring allreduce" and R != LATE:  # a nonblocking one, its handle kept
            handle = collectives.iallreduce(x(), comm=c, algorithm="ring", timeout=T,
                                            validate=False)
            handle.wait()
        else:
            first(c)
        if R == LATE:  # the others had sent all it needed before giving up (an allgather):
            c.barrier(timeout=T)  # its next call is the one that times out
        ck.check(False, f"round {k} {name}: completed although rank {LATE} came late")
    except CollectiveTimeout as exc:
        error = exc
        ck.check(exc.timeout == T, f"round {k} {name}: deadline {exc.timeout}, not {T}")
    except TransportError as exc:  # gloo closes a group's connections when a wait times out
        error = exc
        ck.check(engine == "gloo", f"round {k} {name}: {exc!r} instead of a timeout")
    except Exception as exc:  # noqa: BLE001
        ck.check(False, f"round {k} {name}: {type(exc).__name__} instead of a timeout: {exc}")
    ck.check(c.failure is error, f"round {k} {name}: the communicator's failure is "
                                 f"{c.failure!r}, not the error raised ({error!r})")
    for what, fn in LATER:
        expect_unusable(f"round {k} ({name}) then {what}", lambda f=fn: f(c), error)
    if handle is not None:
        expect_unusable(f"round {k}: the timed-out handle's wait()", handle.wait, error)
        expect_unusable(f"round {k}: the timed-out handle's test()", handle.test, error)
    if R != LATE:
        churn(max(0.0, DELAY + 0.5 - (time.monotonic() - t0)))
    if stop and R == 0:
        os.kill(pids[LATE], signal.SIGCONT)
    if R != LATE:
        churn(0.5)


def healthy(engine: str) -> None:
    """A new communicator after all that works and agrees with numpy."""
    c = fresh(engine)
    for algo in ("ring", "tree", "rabenseifner"):
        y = ck.run(algo, collectives.allreduce, x(), comm=c, algorithm=algo, timeout=60)
        if y is not None:
            ck.check(np.array_equal(y, np.full(N, P * (P + 1) / 2, np.float32)),
                     f"healthy {algo} after the faults: wrong sum")


def kill_gloo() -> None:
    """Rank 1 is SIGKILLed mid-allreduce on gloo: the job must end, not hang."""
    from collectives.ddp import init_from_mpi

    init_from_mpi(WORLD, "gloo", timeout=60)
    c = fresh("gloo")
    big = np.ones(8 << 20, np.float32)
    collectives.allreduce(np.ones(10, np.float32), comm=c)
    if R == 0:
        print("kill-gloo: the group works; killing rank 1", flush=True)
    if R == LATE:
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        for _ in range(50):
            collectives.allreduce(big, comm=c, algorithm="ring", timeout=20, validate=False)
    except CommunicationError as exc:
        print(f"rank {R}: FAILED {type(exc).__name__}: {exc}", flush=True)
        expect_unusable("allreduce after the kill", lambda: collectives.allreduce(
            big, comm=c, timeout=20), exc)
        print(f"rank {R}: {'UNUSABLE' if not ck.failures else ck.failures}", flush=True)
        os._exit(1)
    print(f"rank {R}: survived the loop", flush=True)
    os._exit(0)


if mode == "kill-gloo":
    kill_gloo()
if mode not in ("mpi", "gloo"):
    sys.exit(f"unknown mode {mode!r}: use mpi, gloo or kill-gloo")
if mode == "gloo":
    from collectives.ddp import init_from_mpi

    init_from_mpi(WORLD, "gloo", timeout=60)
for k in range(rounds):
    one_round(mode, k)
    WORLD.Barrier()
healthy(mode)
ck.finish()  # MPI_Finalize copes with the requests the failed communicators keep

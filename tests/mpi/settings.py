"""Settings that differ between ranks, and a rank that refuses its own arguments: every rank
must raise at once, naming the cause, instead of waiting out the timeout.

The last rank starts with ``COMPCOLL_TUNE=0`` in its environment (read at first use, not at
import); later cases set ``collectives.defaults`` on that rank alone, each on a fresh
communicator (the ranks compare their settings on a communicator's first call).
Run: mpiexec -n P python tests/mpi/settings.py  (P >= 2)"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

P, R = MPI.COMM_WORLD.size, MPI.COMM_WORLD.rank
ODD = R == P - 1  # the rank with the other setting
if ODD:
    os.environ["COMPCOLL_TUNE"] = "0"

import numpy as np  # noqa: E402

import collectives  # noqa: E402
from collectives import MismatchError  # noqa: E402

from common import WORLD, Checker  # noqa: E402

T = 60.0  # seconds: the deadline each call would wait out without the checks
FAST = 15.0  # seconds: what "at once" means on an oversubscribed 2-core machine


def x32(n: int = 4096) -> np.ndarray:
    return np.ones(n, np.float32)


def expect(check: Checker, what: str, call: Callable[[], Any], error: type[Exception],
           words: tuple[str, ...]) -> None:
    t0 = time.monotonic()
    try:
        call()
        check.check(False, f"{what}: no error")
    except error as exc:
        for word in words:
            check.check(word in str(exc), f"{what}: {word!r} not in {exc}")
    except Exception as exc:  # noqa: BLE001 - the wrong error is a failure, reported
        check.check(False, f"{what}: {type(exc).__name__}: {exc}")
    took = time.monotonic() - t0
    check.check(took < FAST, f"{what}: took {took:.1f} s (waited for the deadline?)")


def setting(check: Checker, attr: str, odd_value: Any, variable: str) -> None:
    """``collectives.defaults.<attr>`` differs on the last rank: MismatchError on all."""
    saved = getattr(collectives.defaults, attr)
    if ODD:
        setattr(collectives.defaults, attr, odd_value)
    comm = WORLD.Dup()
    try:
        expect(check, f"{attr} differs", lambda: collectives.allreduce(
            x32(), algorithm="auto", comm=comm, timeout=T), MismatchError, (variable,))
    finally:
        setattr(collectives.defaults, attr, saved)
        comm.Free()


def refused(check: Checker, what: str, odd_call: Callable[[Any], Any],
            call: Callable[[Any], Any]) -> None:
    """The last rank's own arguments are refused: it raises ValueError, the others
    MismatchError, all at once."""
    comm = WORLD.Dup()
    try:
        collectives.allreduce(x32(8), comm=comm, timeout=T)  # settings already agreed
        if ODD:
            expect(check, f"{what} (the refusing rank)", lambda: odd_call(comm), ValueError,
                   ())
        else:
            expect(check, f"{what} (a waiting rank)", lambda: call(comm), MismatchError,
                   ("refused its own arguments",))
    finally:
        comm.Free()


def main() -> None:
    check = Checker("settings")
    comm = WORLD.Dup()  # the environment's COMPCOLL_TUNE=0 on the last rank only
    expect(check, "COMPCOLL_TUNE differs", lambda: collectives.allreduce(
        x32(), algorithm="auto", comm=comm, timeout=T), MismatchError, ("COMPCOLL_TUNE",))
    comm.Free()
    if ODD:
        collectives.defaults.tune = True
    setting(check, "segment_bytes", 4096, "COMPCOLL_SEGMENT_BYTES")
    setting(check, "compressed_segment_bytes", 0, "COMPCOLL_COMPRESSED_SEGMENT_BYTES")
    setting(check, "validate", False, "COMPCOLL_VALIDATE")
    setting(check, "tune", False, "COMPCOLL_TUNE")
    # agreed settings: a call goes through
    comm = WORLD.Dup()
    out = check.run("agreed settings", collectives.allreduce, x32(), comm=comm, timeout=T)
    check.check(out is not None and bool((out == P).all()), "agreed settings: wrong sum")
    comm.Free()
    plain = lambda c: collectives.allreduce(x32(), algorithm="ring", comm=c, timeout=T)  # noqa: E731
    refused(check, "a bad op", lambda c: collectives.allreduce(
        x32(), op="bogus", comm=c, timeout=T), plain)
    refused(check, "a bad algorithm", lambda c: collectives.allreduce(
        x32(), algorithm="bogus", comm=c, timeout=T), plain)
    refused(check, "a bad compressor", lambda c: collectives.allreduce(
        x32(), compressor="bogus", comm=c, timeout=T),
        lambda c: collectives.allreduce(x32(), compressor="uniform:bits=8", comm=c,
                                        timeout=T))
    refused(check, "a bad sparse size", lambda c: collectives.sparse_allreduce(
        np.array([1]), np.ones(1, np.float32), -1, comm=c, timeout=T),
        lambda c: collectives.sparse_allreduce(np.array([1]), np.ones(1, np.float32), 10,
                                               comm=c, timeout=T))
    refused(check, "a bad broadcast root", lambda c: collectives.broadcast(
        x32(), root=P + 3, comm=c, timeout=T),
        lambda c: collectives.broadcast(x32(), root=0, comm=c, timeout=T))
    check.finish()


if __name__ == "__main__":
    main()

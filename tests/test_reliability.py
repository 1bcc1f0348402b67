"""Deadlines and failed communicators: checked values, kept buffers, refused reuse, faults."""

from __future__ import annotations

import gc
import math
import re
import subprocess
import sys
import time
import weakref

import numpy as np
import pytest
from mpi4py import MPI

import collectives
from collectives import CollectiveTimeout
from collectives.errors import CommunicatorUnusable
from collectives.transport.base import Request, wait_all
from collectives.transport.mpi import MPICommunicator
from tests.mpirun import passed as _passed
from tests.mpirun import run

BAD = [float("nan"), float("inf"), -1, 0, -0.5]


@pytest.mark.parametrize("bad", BAD)
def test_bad_timeouts_are_refused_before_any_message(bad: float) -> None:
    x = np.ones(4, np.float32)
    for call in (lambda: collectives.allreduce(x, timeout=bad),
                 lambda: collectives.allreduce(x, timeout=bad, validate=False),
                 lambda: collectives.allreduce(x, timeout=bad, validate=False,
                                               compressor="uniform:bits=8"),
                 lambda: collectives.broadcast(x, timeout=bad, validate=False),
                 lambda: collectives.as_communicator(None).barrier(timeout=bad)):
        with pytest.raises(ValueError, match=r"positive finite number of seconds.*or None"):
            call()
    with pytest.raises(ValueError, match=re.escape(f"timeout={bad!r}")):
        wait_all([], collective="test", timeout=bad)


def test_default_timeout_is_checked_when_set_and_in_the_environment() -> None:
    before = collectives.defaults.timeout
    for bad in (math.nan, -1.0, None):
        with pytest.raises(ValueError, match="collectives.defaults.timeout"):
            collectives.defaults.timeout = bad  # type: ignore[assignment]
    assert collectives.defaults.timeout == before
    for raw in ("nan", "-1", "inf", "0", "soon"):
        # read at first use, never at import (import torch loads the backend's entry point)
        res = subprocess.run([sys.executable, "-c",
                              "import collectives; collectives.defaults.timeout"], text=True,
                             capture_output=True, env={"COMPCOLL_TIMEOUT": raw, "PATH": ""})
        assert res.returncode != 0 and f"COMPCOLL_TIMEOUT={raw!r}" in res.stderr, res.stderr
        assert "positive finite number of seconds" in res.stderr, res.stderr


class _Never(Request):
    def test(self) -> bool:
        return False


def test_abandoned_receive_keeps_its_buffer_and_the_communicator_refuses_reuse() -> None:
    comm = MPICommunicator(MPI.COMM_SELF.Dup())
    buf = np.zeros(1 << 16, np.uint8)
    kept = weakref.ref(buf)
    req = comm.irecv(buf, 0, 7, "a receive nobody sends to")
    del buf
    with pytest.raises(CollectiveTimeout) as info:
        wait_all([req], collective="test", timeout=0.05)
    first = info.value
    del req, info
    gc.collect()
    late = kept()
    assert late is not None, "the engine may still write into the abandoned receive buffer"
    assert comm.failure is first
    # the late message lands in the kept buffer, not in freed memory
    comm.comm.Send([np.full(1 << 16, 9, np.uint8), MPI.BYTE], 0, 7)
    assert comm.comm.Iprobe(0, 7) is False and (late == 9).all()
    for call in (lambda: collectives.allreduce(np.ones(3), comm=comm),
                 lambda: collectives.allreduce(np.ones(3), comm=comm, validate=False),
                 comm.barrier, lambda: comm.allgather_ints([1]),
                 lambda: comm.isend(np.ones(1), 0, 1)):
        with pytest.raises(CommunicatorUnusable, match="CollectiveTimeout.*Abort the job") as e:
            call()
        assert e.value.cause is first and isinstance(e.value, collectives.CommunicationError)


def test_a_fresh_communicator_is_usable_and_requests_name_their_owner() -> None:
    comm = MPICommunicator(MPI.COMM_SELF.Dup())
    assert comm.failure is None
    y = collectives.allreduce(np.arange(5.0), comm=comm, algorithm="ring")
    assert np.array_equal(y, np.arange(5.0))
    req = comm.isend(np.ones(2), 0, 3)
    assert req.owner is comm
    comm.comm.Recv([np.empty(2), MPI.DOUBLE], 0, 3)
    wait_all([req], collective="test", timeout=5)



@pytest.mark.mpi
@pytest.mark.parametrize("engine, rounds", [("mpi", 5), ("gloo", 3)])
def test_late_and_stopped_rank_then_reuse_on_every_rank(engine: str, rounds: int) -> None:
    """Rank 1 late past the deadline (asleep, or SIGSTOPped) on a new communicator each
    round; every rank sees the timeout, then CommunicatorUnusable on each later call, and a
    new communicator works after."""
    _passed(run("reliability.py", 3, engine, str(rounds), timeout=150),
            f"reliability {engine}")


@pytest.mark.mpi
def test_killed_rank_on_gloo_ends_the_job() -> None:
    t0 = time.monotonic()
    res = run("reliability.py", 3, "kill-gloo", timeout=90)
    assert "the group works" in res.stdout and "signal 9" in res.stdout, res.stdout[-4000:]
    assert res.returncode != 0
    assert "survived the loop" not in res.stdout, res.stdout[-4000:]
    assert time.monotonic() - t0 < 80


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_ddp_state_and_rendezvous_refuse_bad_timeouts(bad: float) -> None:
    from collectives.ddp import CompressionState, init_from_mpi

    with pytest.raises(ValueError, match="positive finite number of seconds"):
        CompressionState(timeout=bad)
    with pytest.raises(ValueError, match="timeout must be > 0 seconds"):
        init_from_mpi(None, timeout=bad)  # refused before the communicator is used

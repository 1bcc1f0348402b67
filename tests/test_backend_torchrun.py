"""The ``compcoll`` torch.distributed backend under torchrun: gloo's collectives beside the
compressed allreduce, compressors with shared randomness, a peer that dies mid-transfer, and
settings that differ between ranks."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.mpirun import passed, torchrun

pytestmark = pytest.mark.mpi


def survivors_passed(res: subprocess.CompletedProcess, name: str, survivors: int) -> None:
    """Every surviving rank printed its summary line with checks and no failure (torchrun
    itself fails: a rank was killed)."""
    lines = re.findall(rf"{name}: np=\d+ cases=(\d+) FAILURES (\d+)", res.stdout)
    assert len(lines) == survivors, res.stdout[-6000:]
    assert all(int(c) > 0 and int(f) == 0 for c, f in lines), res.stdout[-6000:]
    assert res.returncode != 0, "the killed rank should fail the torchrun job"


def test_gloo_collectives_averages_and_shared_random_compressors_on_the_backend() -> None:
    passed(torchrun("backend_ops.py", 2, timeout=240), "torchrun backend ops")


def test_a_peer_dying_mid_allreduce_fails_every_survivors_call() -> None:
    res = torchrun("dead_peer.py", 3, "allreduce", timeout=180)
    survivors_passed(res, "torchrun dead peer allreduce", 2)
    # (forwarded lines of the two survivors may interleave: count, not lines)
    assert len(re.findall(r"rank [01] raised ", res.stdout)) == 2, res.stdout[-6000:]


def test_settings_that_differ_between_ranks_are_refused_on_every_rank() -> None:
    passed(torchrun("mismatch.py", 2, "backend", timeout=180), "torchrun mismatch backend")

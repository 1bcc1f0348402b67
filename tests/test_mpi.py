"""Multi-rank tests: each launches one mpiexec that runs a whole group of checks on every rank."""

from __future__ import annotations

import re
import time

import pytest

from tests.mpirun import passed as _passed
from tests.mpirun import run

pytestmark = pytest.mark.mpi



@pytest.mark.parametrize("np_", [1, 2, 3, 4, 5, 7, 8])
def test_allreduce_matrix(np_: int) -> None:
    args = ["--large"] if np_ in (3, 4) else []
    _passed(run("matrix.py", np_, *args, timeout=400), "allreduce matrix")


@pytest.mark.parametrize("np_", [1, 2, 3, 5])
def test_features(np_: int) -> None:
    _passed(run("features.py", np_, timeout=200), "features")


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_torch_distributed_transport(np_: int) -> None:
    _passed(run("torch_transport.py", np_, timeout=200), "torch transport")


def test_absent_rank_times_out_naming_the_step_and_peer() -> None:
    # Ranks leave with os._exit after the timeout (their MPI state is unusable), so mpiexec's
    # exit code reflects its clean-up; what matters is what each survivor reported.
    res = run("failures.py", 3, "timeout", timeout=60)
    assert "NO TIMEOUT" not in res.stdout, res.stdout
    # Forwarded lines of different ranks may interleave, so count matches, not lines.
    out = res.stdout
    assert len(re.findall(r"rank [02]: TIMEOUT after", out)) == 2, out
    assert "waiting for rank 1" in out and "ring reduce-scatter step 0" in out, out
    for seconds in re.findall(r"TIMEOUT after ([\d.]+)s", out):
        assert float(seconds) < 10


def test_unhandled_exception_aborts_every_rank() -> None:
    t0 = time.monotonic()
    res = run("failures.py", 3, "raise", timeout=60)
    assert res.returncode != 0
    # The launcher may cut the forwarded output short once the abort lands.
    assert "deliberate failure on rank 1" in res.stdout or "MPI_Abort" in res.stdout, res.stdout
    assert "finished without rank 1" not in res.stdout
    assert time.monotonic() - t0 < 30


def test_killed_rank_fails_the_job_instead_of_hanging() -> None:
    t0 = time.monotonic()
    res = run("failures.py", 3, "kill", timeout=60)
    assert res.returncode != 0
    assert "survived the loop" not in res.stdout
    assert time.monotonic() - t0 < 40


@pytest.mark.parametrize("mode", ["kill-two-level", "kill-two-level-compressed"])
def test_a_rank_killed_on_one_host_ends_the_two_level_job_on_every_host(mode: str) -> None:
    t0 = time.monotonic()
    res = run("failures.py", 4, mode, timeout=90)
    assert res.returncode != 0
    assert "survived the loop" not in res.stdout
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("np_", [1, 2, 3, 5, 8])
def test_sparse_allreduce(np_: int) -> None:
    _passed(run("sparse.py", np_, timeout=200), "sparse allreduce")


@pytest.mark.parametrize("np_", [1, 2, 3, 5])
def test_compressed_allreduce(np_: int) -> None:
    _passed(run("compressed.py", np_, timeout=300), "compressed allreduce")


def test_gpu_smoke_script_on_host_arrays() -> None:
    """scripts/gpu_smoke.py with --cpu: the GPU machine's checks, host arrays and a fake device
    (so the script stays runnable where no GPU is)."""
    res = run("../../scripts/gpu_smoke.py", 3, "--cpu", "--only", "dense,compressed,sparse,ddp",
              timeout=300)
    assert res.returncode == 0 and ", 0 failed" in res.stdout.splitlines()[-1], res.stdout[-4000:]

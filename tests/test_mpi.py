"""Multi-rank tests: each launches one mpiexec that runs a whole group of checks on every rank."""

from __future__ import annotations

import re
import time

import pytest

from tests.mpirun import LAUNCHES, Script, run
from tests.mpirun import passed as _passed

pytestmark = pytest.mark.mpi

MATRIX = {1: (), 2: (), 3: ("--large",), 4: ("--large",), 5: (), 7: (), 8: ()}
FEATURES = [1, 2, 3, 5]
TORCH_TRANSPORT = [2, 3, 4]
SPARSE = [1, 2, 3, 5, 8]
COMPRESSED = [1, 2, 3, 5]
LAUNCHES.add(*[Script("matrix.py", n, args, timeout=400) for n, args in MATRIX.items()],
             *[Script("features.py", n, timeout=200) for n in FEATURES],
             *[Script("torch_transport.py", n, timeout=200) for n in TORCH_TRANSPORT],
             *[Script("sparse.py", n, timeout=200) for n in SPARSE],
             *[Script("compressed.py", n, timeout=300) for n in COMPRESSED])


@pytest.mark.parametrize("np_", MATRIX)
def test_allreduce_matrix(np_: int) -> None:
    _passed(LAUNCHES.result("matrix.py", np_, *MATRIX[np_]), "allreduce matrix")


@pytest.mark.parametrize("np_", FEATURES)
def test_features(np_: int) -> None:
    _passed(LAUNCHES.result("features.py", np_), "features")


@pytest.mark.parametrize("np_", TORCH_TRANSPORT)
def test_torch_distributed_transport(np_: int) -> None:
    _passed(LAUNCHES.result("torch_transport.py", np_), "torch transport")


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


@pytest.mark.parametrize("np_", SPARSE)
def test_sparse_allreduce(np_: int) -> None:
    _passed(LAUNCHES.result("sparse.py", np_), "sparse allreduce")


@pytest.mark.parametrize("np_", COMPRESSED)
def test_compressed_allreduce(np_: int) -> None:
    _passed(LAUNCHES.result("compressed.py", np_), "compressed allreduce")


def test_gpu_smoke_script_on_host_arrays() -> None:
    """scripts/gpu_smoke.py with --cpu: the GPU machine's checks, host arrays and a fake device
    (so the script stays runnable where no GPU is)."""
    res = run("../../scripts/gpu_smoke.py", 3, "--cpu", "--only", "dense,compressed,sparse,ddp",
              timeout=300)
    assert res.returncode == 0 and ", 0 failed" in res.stdout.splitlines()[-1], res.stdout[-4000:]

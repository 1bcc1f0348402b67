"""``comm=None`` under torchrun and under mpiexec: the job the caller is in, decided per call."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script, passed, torchrun

pytestmark = pytest.mark.mpi

LAUNCHES.add(Script("default_comm.py", 2, timeout=120))


def test_comm_none_follows_torch_distributed_under_torchrun(tmp_path) -> None:
    passed(torchrun("default_comm.py", 2, str(tmp_path / "store"), timeout=180),
           "torchrun default comm")


def test_comm_none_is_the_mpi_world_under_mpiexec_and_refuses_a_different_torch_size() -> None:
    passed(LAUNCHES.result("default_comm.py", 2), "mpi default comm")


def test_compcoll_backend_string_compresses_ddp_and_trains_like_gloo() -> None:
    res = torchrun("backend.py", 2, timeout=240)
    passed(res, "torchrun backend")
    assert "backend training:" in res.stdout


@pytest.mark.parametrize("policy", ["auto", "uniform:bits=8", "auto bfloat16"])
def test_the_readme_ddp_snippet_runs_as_written_under_torchrun(tmp_path, monkeypatch,
                                                               policy: str) -> None:
    """The snippet as written ("auto"), with the fixed compressor the README offers, and on a
    bfloat16 model (whose gradients the automatic policy profiles)."""
    monkeypatch.setenv("COMPCOLL_CACHE_DIR", str(tmp_path / "cache"))
    passed(torchrun("front_door.py", 2, *policy.split(), timeout=240), "torchrun front door")

"""The ``compcoll`` backend's group over its life under torchrun: made again after
``destroy_process_group``; its compressed calls' deadline; launcher variables that cannot
place a rank on a host."""

from __future__ import annotations

import subprocess

import pytest

from tests.mpirun import passed, torchrun, torchrun_together

pytestmark = pytest.mark.mpi


def test_the_group_is_made_again_after_destroy_as_often_as_wanted() -> None:
    passed(torchrun("backend_reinit.py", 2, timeout=240), "torchrun backend reinit")


def test_ddp_trains_through_the_backend_on_two_hosts_of_two_ranks() -> None:
    res = torchrun("backend_hosts.py", 4, timeout=420)
    passed(res, "torchrun backend hosts")
    assert "backend hosts training:" in res.stdout


def test_strided_tensors_are_reduced_in_their_own_layout() -> None:
    passed(torchrun("backend_strided.py", 2, timeout=180), "torchrun backend strided")


BACKEND_DEADLINES = ["group", "env"]


@pytest.fixture(scope="module")
def backend_deadlines() -> dict[str, subprocess.CompletedProcess]:
    """Both cases at once: their ranks mostly wait out a deadline (10 s and 5 s)."""
    return torchrun_together("backend_deadline.py", 2, BACKEND_DEADLINES, timeout=240)


@pytest.mark.parametrize("case", BACKEND_DEADLINES)
def test_compressed_calls_wait_the_group_timeout_unless_compcoll_timeout_is_set(
        case: str, backend_deadlines: dict[str, subprocess.CompletedProcess]) -> None:
    passed(backend_deadlines[case], f"torchrun backend deadline {case}")


def test_a_bad_torchrun_rank_variable_on_one_rank_fails_every_rank_at_once() -> None:
    passed(torchrun("backend_env.py", 2, timeout=240), "torchrun backend env")

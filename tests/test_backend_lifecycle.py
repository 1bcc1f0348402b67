"""The ``compcoll`` backend's group over its life under torchrun: made again after
``destroy_process_group``; its compressed calls' deadline; launcher variables that cannot
place a rank on a host."""

from __future__ import annotations

import pytest

from tests.mpirun import passed, torchrun

pytestmark = pytest.mark.mpi


def test_the_group_is_made_again_after_destroy_as_often_as_wanted() -> None:
    passed(torchrun("backend_reinit.py", 2, timeout=240), "torchrun backend reinit")


def test_ddp_trains_through_the_backend_on_two_hosts_of_two_ranks() -> None:
    res = torchrun("backend_hosts.py", 4, timeout=420)
    passed(res, "torchrun backend hosts")
    assert "backend hosts training:" in res.stdout


def test_strided_tensors_are_reduced_in_their_own_layout() -> None:
    passed(torchrun("backend_strided.py", 2, timeout=180), "torchrun backend strided")


@pytest.mark.parametrize("case", ["group", "env"])
def test_compressed_calls_wait_the_group_timeout_unless_compcoll_timeout_is_set(
        case: str) -> None:
    passed(torchrun("backend_deadline.py", 2, case, timeout=240),
           f"torchrun backend deadline {case}")


def test_a_bad_torchrun_rank_variable_on_one_rank_fails_every_rank_at_once() -> None:
    passed(torchrun("backend_env.py", 2, timeout=240), "torchrun backend env")

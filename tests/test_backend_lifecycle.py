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

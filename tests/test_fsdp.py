"""The compressed reduce-scatter for FSDP2 (``collectives.fsdp``) under torchrun."""

from __future__ import annotations

import pytest

from tests.mpirun import passed, torchrun, torchrun_together
from tests.test_backend_torchrun import survivors_passed

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nproc", [2, 3])
def test_compressed_reduce_scatter_matches_the_exact_one_and_fsdp2_trains_like_default(
        nproc: int) -> None:
    res = torchrun("fsdp.py", nproc, timeout=280)
    passed(res, "torchrun fsdp")
    assert "fsdp training losses:" in res.stdout


def test_different_settings_on_one_rank_raise_mismatch_on_every_rank() -> None:
    passed(torchrun("mismatch.py", 2, "fsdp", timeout=180), "torchrun mismatch fsdp")


def test_a_peer_dying_mid_reduce_scatter_fails_every_survivors_call() -> None:
    res = torchrun("dead_peer.py", 3, "fsdp", timeout=180)
    survivors_passed(res, "torchrun dead peer fsdp", 2)


@pytest.mark.parametrize("layout", ["2x2", "2x2-interleaved"])
def test_on_two_hosts_the_reduce_scatter_compresses_only_across_hosts(layout: str) -> None:
    res = torchrun("fsdp_two_level.py", 4, layout, timeout=280)
    passed(res, f"torchrun fsdp two-level {layout}")
    assert "fsdp two-level training losses:" in res.stdout


FSDP_DEADLINES = ["group", "arg"]


@pytest.fixture(scope="module")
def fsdp_deadlines() -> dict:
    """Both cases at once: their ranks mostly wait out a deadline (3 and 6 s)."""
    return torchrun_together("fsdp_deadline.py", 2, FSDP_DEADLINES, timeout=180)


@pytest.mark.parametrize("case", FSDP_DEADLINES)
def test_the_reduce_scatter_waits_the_process_groups_timeout_unless_told_otherwise(
        case: str, fsdp_deadlines: dict) -> None:
    passed(fsdp_deadlines[case], f"torchrun fsdp deadline {case}")

"""collectives.optim under mpiexec (see tests/mpi/diloco.py for what each rank checks)."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script, passed

pytestmark = pytest.mark.mpi

LAUNCHES.add(*[Script(name, n, timeout=300) for n in (2, 3)
               for name in ("diloco.py", "onebit.py")])


@pytest.mark.parametrize("np_", [2, 3])
def test_diloco_is_synchronous_sgd_at_one_step_resumes_exactly_and_refuses_mismatches(
        np_: int) -> None:
    passed(LAUNCHES.result("diloco.py", np_), "diloco")


@pytest.mark.parametrize("np_", [2, 3])
def test_onebit_adam_is_adam_before_the_freeze_masks_unused_rows_and_resumes_exactly(
        np_: int) -> None:
    passed(LAUNCHES.result("onebit.py", np_), "onebit")


def test_diloco_auto_sync_every_prices_the_sync_against_whole_steps() -> None:
    """Each probe step (one step() call to the next) holds its sync; H keeps a sync within
    the share of H steps. A step shorter than its own sync used to read as a step of zero
    work and sync every 1000 steps."""
    from collectives.optim import diloco

    assert diloco.sync_every_for([0.18] * 4, [0.10] * 4, 0.1) == 12  # 80 ms work, 100 ms sync
    # 55 ms of work and a 100 ms sync (mlp-wide on 1 Gbit/s): 17, not the 1000 cap
    assert diloco.sync_every_for([0.155, 0.16, 0.15], [0.1, 0.1, 0.1], 0.1) == 17
    assert diloco.sync_every_for([0.2] * 3, [0.001] * 3, 0.1) == 1  # a cheap sync: every step
    assert diloco.sync_every_for([1.0] * 3, [0.99] * 3, 0.01) == diloco.MAX_SYNC_EVERY


def test_diloco_auto_outer_step_averages_close_syncs_and_is_nesterov_for_far_ones() -> None:
    """Nesterov (0.7, 0.9) multiplies the progress of aligned close syncs by 7: on gpt, syncs 4
    steps apart ended at a loss of 3.99 with it against 2.90 averaging (DDP 2.89)."""
    from collectives.optim import diloco

    assert diloco.outer_for(1) == diloco.outer_for(4) == (1.0, 0.0)
    assert diloco.outer_for(diloco.NESTEROV_FROM - 1) == (1.0, 0.0)
    assert diloco.outer_for(diloco.NESTEROV_FROM) == diloco.outer_for(1000) == (0.7, 0.9)

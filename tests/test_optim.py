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
    """Each probe step (one step() call to the next) holds its sync. In the foreground H
    keeps a sync within 10% of H steps; in the background H is the shortest interval whose
    compute hides the sync. A step shorter than its own sync used to read as a step of zero
    work and sync every 1000 steps."""
    from collectives.optim.intervals import MAX_SYNC_EVERY, sync_every_for

    assert sync_every_for(0.18, 0.10, background=False) == 12  # 80 ms work, 100 ms sync
    assert sync_every_for(0.18, 0.10, background=True) == 2  # 100 ms within 0.8 x 2 x 80 ms
    # 55 ms of work and a 100 ms sync (mlp-wide on 1 Gbit/s): 17, not the 1000 cap
    assert sync_every_for(0.155, 0.1, background=False) == 17
    assert sync_every_for(0.155, 0.1, background=True) == 3
    assert sync_every_for(0.2, 0.001, background=False) == 1  # a cheap sync: every step
    assert sync_every_for(1.0, 0.999999, background=False) == MAX_SYNC_EVERY


def test_diloco_auto_widens_the_interval_while_background_steps_run_slow() -> None:
    """A background exchange is hidden only where it has cores of its own: steps more than
    10% slower than compute alone double the interval, up to the foreground rule's."""
    from collectives.optim.intervals import SLOWDOWN, widen

    assert widen(0.40, 0.23, 1, 4) == 2 and widen(0.40, 0.23, 2, 4) == 4
    assert widen(0.40, 0.23, 4, 4) == 4 and widen(0.40, 0.23, 3, 4) == 4  # never past it
    assert widen(0.23 * (1 + SLOWDOWN), 0.23, 1, 4) == 1  # within the slowdown: kept


def test_diloco_auto_agrees_on_the_slowest_step_and_the_fastest_sync() -> None:
    """A rank that waits for a slower one counts the wait in its sync; the last to arrive
    does not. The probe's medians leave the first (set-up) step out."""
    from collectives.optim.intervals import probe_times

    assert probe_times([5.0, 0.2, 0.2, 0.3], [0.05, 0.06, 0.04]) == (0.2, 0.05)
    assert probe_times([], []) == (1e-3, 0.0)


def test_diloco_auto_outer_step_averages_close_syncs_and_grows_its_gain_with_the_interval(
        ) -> None:
    """Nesterov (0.7, 0.9) multiplies the progress of aligned close syncs by 7: on gpt, syncs 4
    steps apart ended at a loss of 3.99 with it against 2.90 averaging (DDP 2.89). The rule
    averages up to GAIN_FROM steps, then keeps the immediate move lr (1 + m) at 1 and the
    steady gain lr / (1 - m) at H / GAIN_FROM, up to momentum 0.9."""
    import math

    from collectives.optim.intervals import GAIN_FROM, MAX_MOMENTUM, outer_for

    assert outer_for(1) == outer_for(4) == outer_for(GAIN_FROM) == (1.0, 0.0)
    for h in (GAIN_FROM + 1, 2 * GAIN_FROM, 4 * GAIN_FROM, 10 * GAIN_FROM, 10_000):
        lr, m = outer_for(h)
        assert 0 < m <= MAX_MOMENTUM + 1e-12 and math.isclose(lr * (1 + m), 1.0)
        gain = lr / (1 - m)
        assert math.isclose(gain, min(h / GAIN_FROM, 1 / (1 - MAX_MOMENTUM ** 2)))
    gains = [(lambda lr, m: lr / (1 - m))(*outer_for(h)) for h in range(1, 300)]
    assert gains == sorted(gains)  # never less momentum for a longer interval


@pytest.mark.mpi
def test_diloco_a_peer_dying_mid_background_sync_fails_every_survivors_step() -> None:
    import re

    from tests.mpirun import torchrun
    from tests.test_backend_torchrun import survivors_passed

    res = torchrun("diloco_dead_peer.py", 3, timeout=180)
    survivors_passed(res, "torchrun diloco dead peer", 2)
    assert len(re.findall(r"rank [01] raised ", res.stdout)) == 2, res.stdout[-6000:]


def test_diloco_auto_compressor_sends_8_bits_only_where_the_link_prices_them_cheaper() -> None:
    """``compressor="auto"`` pinned on fitted links, never on this machine's: 8 bits over 1
    Gbit/s, float32 over shared memory, float32 where coding costs more than the bytes
    save, and float32 on one rank."""
    from collectives.costparams import CostParams
    from collectives.optim.diloco import AUTO_COMPRESSOR, compressor_for
    gbit, shm = CostParams(50e-6, 8e-9, 1e-10), CostParams(2e-6, 1e-10, 1e-10)
    n = 1 << 20  # 4 MiB of float32: 51 ms a ring allreduce at 1 Gbit/s over 4 ranks, 13 at 8 bits
    assert compressor_for(4, n, 2e-3, gbit) == AUTO_COMPRESSOR
    assert compressor_for(4, n, 2e-3, shm) == "none"
    assert compressor_for(4, n, 25e-3, gbit) == "none"  # 50 ms of coding against 38 saved
    assert compressor_for(1, n, 0.0, gbit) == "none"

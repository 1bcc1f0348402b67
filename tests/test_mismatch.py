"""Ranks that must agree, and identity twins that must be drop-ins, under mpiexec."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script
from tests.mpirun import passed as _passed

pytestmark = pytest.mark.mpi

# Each mismatch call's own deadline is 20 s; the launcher's covers a whole matrix that hangs.
LAUNCHES.add(*[Script("mismatch.py", n, timeout=120) for n in (2, 3)],
             Script("mismatch.py", 3, ("--torch",), timeout=180),
             Script("twins.py", 3, timeout=200),
             *[Script("settings.py", n, timeout=240) for n in (2, 3)])


@pytest.mark.parametrize("np_", [2, 3])
def test_every_rank_raises_when_one_rank_passes_another_value(np_: int) -> None:
    _passed(LAUNCHES.result("mismatch.py", np_), "mismatch")


def test_every_rank_raises_on_a_torch_distributed_group() -> None:
    _passed(LAUNCHES.result("mismatch.py", 3, "--torch"), "mismatch")


def test_feedback_twins_through_every_scheme_and_compressor() -> None:
    _passed(LAUNCHES.result("twins.py", 3), "twins")


@pytest.mark.parametrize("np_", [2, 3])
def test_settings_that_differ_or_refused_arguments_raise_on_every_rank_at_once(np_: int) -> None:
    _passed(LAUNCHES.result("settings.py", np_), "settings")


def test_ddp_hook_settings_that_differ_raise_on_every_rank_under_torchrun() -> None:
    from tests.mpirun import torchrun

    _passed(torchrun("mismatch.py", 2, "hook", timeout=240), "torchrun mismatch hook")

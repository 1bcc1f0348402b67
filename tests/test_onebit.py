"""collectives.optim.OneBitAdam as users drive it (tests/mpi/onebit_refusals.py under mpiexec),
and its refresh schedule, derived from step counts only."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script, passed

LAUNCHES.add(*[Script("onebit_refusals.py", n, timeout=300) for n in (2, 3)])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [2, 3])
def test_onebit_adam_leaves_frozen_parameters_compares_groups_refuses_on_every_rank(
        np_: int) -> None:
    passed(LAUNCHES.result("onebit_refusals.py", np_), "onebit_refusals")


def test_refresh_doubles_from_the_freeze_until_its_bound() -> None:
    from collectives.optim.onebit_settings import Schedule

    s = Schedule.of(freeze_step=5, refresh="doubling:until=40")
    assert [t for t in range(1, 100) if s.refreshes(t, 5)] == [10, 20, 40]
    assert s.refreshed(39, 5) == [10, 20] and s.v_at(39, 5) == 20 and s.v_at(9, 5) == 5
    assert s.spec == "doubling:until=40"
    forever = Schedule.of(refresh="doubling")
    assert [t for t in range(1, 200) if forever.refreshes(t, 3)] == [6, 12, 24, 48, 96, 192]
    assert not any(Schedule.of(refresh="never").refreshes(t, 3) for t in range(1, 100))
    assert not forever.refreshes(6, None)  # nothing before the freeze


@pytest.mark.parametrize("bad", ["sometimes", "doubling:until=0", "doubling:until=x", 3, None])
def test_refresh_refuses_what_it_does_not_take(bad: object) -> None:
    from collectives.optim.onebit_settings import Schedule

    with pytest.raises(ValueError, match="refresh must be 'doubling'"):
        Schedule.of(refresh=bad)


def test_onebit_adam_takes_only_its_schedule_keywords() -> None:
    torch = pytest.importorskip("torch")
    from mpi4py import MPI

    from collectives.optim import OneBitAdam

    model = torch.nn.Linear(4, 3)
    opt = OneBitAdam(model.parameters(), comm=MPI.COMM_SELF, freeze_step=2, refresh="never")
    assert (opt.freeze_step, opt.refresh) == (2, "never")
    with pytest.raises(TypeError, match="unexpected keyword argument 'refersh'"):
        OneBitAdam(model.parameters(), comm=MPI.COMM_SELF, refersh="never")

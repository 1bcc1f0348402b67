"""collectives.optim under mpiexec (see tests/mpi/diloco.py for what each rank checks)."""

from __future__ import annotations

import pytest

from tests.mpirun import passed, run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("np_", [2, 3])
def test_diloco_is_synchronous_sgd_at_one_step_resumes_exactly_and_refuses_mismatches(
        np_: int) -> None:
    passed(run("diloco.py", np_, timeout=300), "diloco")


@pytest.mark.parametrize("np_", [2, 3])
def test_onebit_adam_is_adam_before_the_freeze_masks_unused_rows_and_resumes_exactly(
        np_: int) -> None:
    passed(run("onebit.py", np_, timeout=300), "onebit")

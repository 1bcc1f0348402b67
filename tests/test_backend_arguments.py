"""Bad ``root`` and ``counts`` of the public ``broadcast`` and ``reduce_scatter`` under
mpiexec: the same clear error on every rank, nothing left waiting."""

from __future__ import annotations

import pytest

from tests.mpirun import passed, run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_root_and_counts_are_refused_alike_on_every_rank(np_: int) -> None:
    passed(run("root_counts.py", np_, timeout=120), "root counts")

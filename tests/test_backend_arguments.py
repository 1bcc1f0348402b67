"""Bad ``root`` and ``counts`` of the public ``broadcast`` and ``reduce_scatter`` under
mpiexec: the same clear error on every rank, nothing left waiting."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script, passed

pytestmark = pytest.mark.mpi

LAUNCHES.add(*[Script("root_counts.py", n, timeout=120) for n in (2, 3)])


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_root_and_counts_are_refused_alike_on_every_rank(np_: int) -> None:
    passed(LAUNCHES.result("root_counts.py", np_), "root counts")

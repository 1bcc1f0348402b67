"""NaN/Inf on one rank through every compressor and scheme, and a GradScaler run through the
DDP hook, under mpiexec."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script
from tests.mpirun import passed as _passed

pytestmark = pytest.mark.mpi

LAUNCHES.add(*[Script("nonfinite.py", n, timeout=240) for n in (2, 3)])


@pytest.mark.parametrize("np_", [2, 3])
def test_nonfinite_on_one_rank_shows_then_clears(np_: int) -> None:
    _passed(LAUNCHES.result("nonfinite.py", np_), "nonfinite")

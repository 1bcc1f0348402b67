"""NaN/Inf on one rank through every compressor and scheme, and a GradScaler run through the
DDP hook, under mpiexec."""

from __future__ import annotations

import pytest

from tests.mpirun import passed as _passed
from tests.mpirun import run

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("np_", [2, 3])
def test_nonfinite_on_one_rank_shows_then_clears(np_: int) -> None:
    _passed(run("nonfinite.py", np_, timeout=240), "nonfinite")

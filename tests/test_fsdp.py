"""The compressed reduce-scatter for FSDP2 (``collectives.fsdp``) under torchrun."""

from __future__ import annotations

import pytest

from tests.mpirun import passed, torchrun

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nproc", [2, 3])
def test_compressed_reduce_scatter_matches_the_exact_one_and_fsdp2_trains_like_default(
        nproc: int) -> None:
    res = torchrun("fsdp.py", nproc, timeout=280)
    passed(res, "torchrun fsdp")
    assert "fsdp training losses:" in res.stdout

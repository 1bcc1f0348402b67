"""The two-level compressed allreduce on hosts emulated through COMPCOLL_HOST under mpiexec:
2 hosts of 2 ranks (with the cost model's link classes fitted there, and set-up bounded by
the call's timeout) and 2 hosts of 3 (see tests/mpi/two_level_compressed.py)."""

from __future__ import annotations

import pytest

from tests.mpirun import LAUNCHES, Script, passed

LAYOUTS = {4: ("2x2", "--fit", "--timeout"), 6: ("2x3",)}
LAUNCHES.add(*[Script("two_level_compressed.py", n, args, timeout=180)
               for n, args in LAYOUTS.items()])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", sorted(LAYOUTS))
def test_two_level_compressed_allreduce_on_emulated_hosts(np_: int) -> None:
    passed(LAUNCHES.result("two_level_compressed.py", np_, *LAYOUTS[np_]),
           "two-level compressed")

"""Under mpiexec: ``comm=None`` is MPI.COMM_WORLD, also when torch.distributed spans the same
ranks, and an error naming both sizes when torch.distributed was set up with another size.

Run: mpiexec -n P python tests/mpi/default_comm.py   (P >= 2)
"""

from __future__ import annotations

import numpy as np
import torch.distributed as dist

import collectives
from collectives import CommunicationError
from collectives.ddp import init_from_mpi

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
ck = Checker("mpi default comm")
want = np.full(100, P * (P + 1) / 2, np.float32)


def world_is_default(when: str) -> None:
    c = collectives.as_communicator(None)
    ck.check(c.engine == "mpi" and c.size == P, f"{when}: comm=None gave {c!r}")
    y = collectives.allreduce(np.full(100, R + 1, np.float32), algorithm="ring", timeout=60)
    ck.check(np.array_equal(y, want), f"{when}: wrong sum {y[:3]}")


ck.run("torch.distributed not initialized", world_is_default, "no torch")
# every rank alone in its own torch.distributed world: which job comm=None means is ambiguous
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
try:
    collectives.allreduce(np.ones(3, np.float32))
    ck.check(False, "MPI world of P and a torch world of 1: comm=None did not refuse")
except CommunicationError as exc:
    ck.check(f"MPI world has {P} ranks" in str(exc) and "has 1" in str(exc)
             and "pass comm=" in str(exc), f"the ambiguity error does not name both: {exc}")
dist.destroy_process_group()
init_from_mpi(WORLD, "gloo", timeout=60)  # the same ranks under both engines
ck.run("torch.distributed over the same ranks", world_is_default, "init_from_mpi")
dist.destroy_process_group()
ck.finish()

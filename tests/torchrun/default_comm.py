"""Under torchrun (no MPI launcher): ``comm=None`` follows torch.distributed's default group,
decided at each call: before init (an error: torchrun started P ranks, but only the group
would join them), after init, after destroy (the error again), after a new init.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/default_comm.py STORE_FILE
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import collectives
from collectives import CommunicationError
from collectives.ddp import CompressionState

R, P = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
failures: list[str] = []
cases = 0


def check(cond: bool, what: str) -> None:
    global cases
    cases += 1
    if not cond:
        failures.append(f"rank {R}: {what}")


def guarded(what: str, fn) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - reported as a failure of ``what``
        check(False, f"{what}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")


def x(n: int = 1000) -> np.ndarray:
    return np.full(n, R + 1, np.float32)


TOTAL = P * (P + 1) / 2


def alone() -> None:
    for what, call in (("as_communicator", lambda: collectives.as_communicator(None)),
                       ("allreduce", lambda: collectives.allreduce(x()))):
        try:
            got = call()
            check(False, f"no torch.distributed: {what} ran alone, got {got!r}")
        except CommunicationError as exc:
            check("init_process_group" in str(exc) and f"WORLD_SIZE={P}" in str(exc),
                  f"no torch.distributed: {what}'s error does not say why: {exc}")
    mine = collectives.allreduce(x(), comm=MPI.COMM_SELF)  # alone, asked for explicitly
    check(np.array_equal(mine, x()), "comm=MPI.COMM_SELF: not this rank's values")


def follows_torch(round_: str) -> None:
    c = collectives.as_communicator(None)
    check(c.engine == "torch" and c.size == P and c is collectives.as_communicator(None),
          f"{round_}: comm=None gave {c!r}, not the torch.distributed default group")
    for algo in ("auto", "ring", "tree", "torch"):
        y = collectives.allreduce(x(), algorithm=algo, timeout=60)
        check(np.array_equal(y, np.full(1000, TOTAL, np.float32)), f"{round_} {algo}: {y[:3]}")
    t = torch.full((777,), float(R + 1))
    h = collectives.iallreduce(t, op="avg", algorithm="rabenseifner")
    check(torch.equal(h.wait(), torch.full((777,), TOTAL / P)), f"{round_}: iallreduce avg")
    y = collectives.allreduce(x(4096), compressor="uniform:bits=8", name="w")
    check(np.allclose(y, TOTAL, rtol=0.02), f"{round_}: compressed allreduce {y[:3]}")
    g = collectives.allgather(np.arange(R + 2, dtype=np.int32))
    want = np.concatenate([np.arange(r + 2, dtype=np.int32) for r in range(P)])
    check(np.array_equal(g, want), f"{round_}: allgather {g}")
    b = collectives.broadcast(x(10), root=P - 1)
    check(np.array_equal(b, np.full(10, P, np.float32)), f"{round_}: broadcast {b}")
    rs = collectives.reduce_scatter(np.ones(2 * P, np.float32))
    check(np.array_equal(rs, np.full(2, P, np.float32)), f"{round_}: reduce_scatter {rs}")
    state = CompressionState()
    check(state.communicator().size == P and state.communicator().engine == "torch",
          f"{round_}: the DDP hook's default communicator is {state.communicator()!r}")


guarded("before init", alone)
dist.init_process_group("gloo")
guarded("after init", lambda: follows_torch("first group"))
first = collectives.as_communicator(None)
dist.destroy_process_group()
guarded("after destroy", alone)
store = dist.FileStore(sys.argv[1], P)
dist.init_process_group("gloo", store=store, rank=R, world_size=P)
check(collectives.as_communicator(None) is not first, "a new group got the old communicator")
guarded("after a new init", lambda: follows_torch("second group"))
gathered: list = [None] * P
dist.all_gather_object(gathered, (cases, failures))
if R == 0:
    for _, fails in gathered:
        for f in fails[:20]:
            print("FAIL", f)
    bad = sum(len(f) for _, f in gathered)
    print(f"torchrun default comm: np={P} cases={sum(c for c, _ in gathered)} FAILURES {bad}",
          flush=True)
dist.destroy_process_group()
# Leave without interpreter finalization: gloo's worker threads may still hold finished work
# objects whose tensors then get released after Python is torn down, and torch aborts the
# process ("terminate called without an active exception"), an upstream teardown race that
# has nothing to do with what was checked above.
sys.stdout.flush()
os._exit(1 if any(f for _, f in gathered) else 0)

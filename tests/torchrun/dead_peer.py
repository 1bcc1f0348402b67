"""A peer that dies mid-transfer fails the survivors' call, under torchrun on 3 ranks.

Rank 2 starts the collective (``async_op=True``: its first messages are out) and SIGKILLs
itself. Rank 0 waits in the blocking call, rank 1 in ``work.wait()``; each must raise from
that call (within the group's 10 s timeout), never return as if the sum were done.

* ``allreduce``: a large float ``dist.all_reduce`` on the ``compcoll`` backend (the
  compressed path, completed on the backend's worker thread);
* ``fsdp``: ``CompressedReduceScatter`` on a gloo group, its exact path with AVG (a gloo
  reduce-scatter, then the division in a chained ``Work``).

torchrun stops the survivors once it sees rank 2 gone: they ignore its SIGTERM until they
have reported. Each survivor prints its own summary line.

Run: torchrun --standalone --nproc-per-node 3 tests/torchrun/dead_peer.py allreduce
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)
from collectives.fsdp import CompressedReduceScatter

from torchrun_checks import Checks, P, R

MODE = sys.argv[1]
checks = Checks(f"torchrun dead peer {MODE}")
check = checks.check


def start(t: torch.Tensor, async_op: bool) -> object:
    if MODE == "allreduce":
        return dist.all_reduce(t, async_op=async_op)
    rs = CompressedReduceScatter(error_feedback=False, min_numel=1 << 30)  # the exact path
    return rs(torch.empty(t.numel() // P), t, dist.group.WORLD, dist.ReduceOp.AVG,
              async_op=async_op)


def main() -> None:
    dist.init_process_group("compcoll" if MODE == "allreduce" else "gloo",
                            timeout=timedelta(seconds=10))
    warm = torch.ones(P * 50_000)
    work = start(warm, async_op=True)
    work.wait()  # every rank is set up and through one call
    dist.barrier()
    t = torch.full((P * 1_000_000,), float(R + 1))
    if R == P - 1:
        start(t, async_op=True)
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # report first
    blocking = R == 0
    try:
        if blocking:
            start(t, async_op=False)
        else:
            start(t, async_op=True).wait()
        check(False, f"{'blocking call' if blocking else 'work.wait()'} returned although "
                     f"rank {P - 1} died mid-transfer (values {t[:3].tolist()})")
    except Exception as exc:  # noqa: BLE001 - any error is right; returning is wrong
        check(True, "raised")
        print(f"rank {R} raised {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    checks.guarded(MODE, main)
    checks.finish()

"""How long the DDP hook waits: ``timeout=`` where given, else the process group's own
timeout (as long as DDP itself waits), unless ``COMPCOLL_TIMEOUT`` is set.

Rank 1 steps while rank 0 stays out (evaluating alone, as nanoGPT does); rank 1's hook must
give up naming the deadline in force, and rank 0 must then leave without joining:

* ``group``: gloo with a group timeout of 8 s, COMPCOLL_TIMEOUT unset: 8 s;
* ``env``: COMPCOLL_TIMEOUT=4 and a group timeout of 120 s: 4 s;
* ``arg``: CompressionState(timeout=3) and a group timeout of 120 s: 3 s;
* ``slow``: a group timeout of 120 s and rank 0 away for 12 s: the step finishes on both
  ranks, as under plain DDP.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/hook_deadline.py group
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import collectives.ddp as cddp

from torchrun_checks import Checks, R

CASE = sys.argv[1]
GROUP, WANT = {"group": (8, 8), "env": (120, 4), "arg": (120, 3), "slow": (120, None)}[CASE]
checks = Checks(f"torchrun hook deadline {CASE}")
check = checks.check


def main() -> None:
    os.environ.pop("COMPCOLL_TIMEOUT", None)
    if CASE == "env":
        os.environ["COMPCOLL_TIMEOUT"] = str(WANT)
    dist.init_process_group("gloo", timeout=timedelta(seconds=GROUP))
    store = dist.distributed_c10d._get_default_store()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(200, 200))  # 40,200 elements: compressed
    state = cddp.CompressionState(policy="uniform:bits=8",
                                  timeout=WANT if CASE == "arg" else None).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    check(state.deadline == (None if CASE == "env" else WANT or GROUP),
          f"deadline {state.deadline} for case {CASE}")
    x = torch.randn(4, 200)
    if CASE == "slow":
        if R == 0:
            time.sleep(12)  # rank 0 evaluates alone
        model(x).square().sum().backward()
        check(torch.isfinite(model.module.weight.grad).all().item(), "the step finished")
        return
    if R == 1:
        try:
            model(x).square().sum().backward()
            check(False, "a step rank 0 never joined finished")
        except Exception as exc:  # noqa: BLE001 - its words are what is checked
            check(f"no progress for {WANT} s" in str(exc),
                  f"the hook gave up after {WANT} s: {type(exc).__name__}: {exc}")
        store.set("deadline checked", "1")
    else:
        store.wait(["deadline checked"], timedelta(seconds=300))
        check(True, "rank 0 stayed out of the step")


if __name__ == "__main__":
    checks.guarded("deadline", main)
    checks.finish()

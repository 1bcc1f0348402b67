"""The deadline of the ``compcoll`` backend's compressed calls: the group's timeout (what
``init_process_group(timeout=...)`` gives gloo), unless ``COMPCOLL_TIMEOUT`` is set.

Rank 0 starts a compressed allreduce that rank 1 never joins (rank 1 waits outside the group
until rank 0 is done); rank 0's call must give up naming the deadline in force:

* ``group``: a group timeout of 10 s, COMPCOLL_TIMEOUT unset: 10 s;
* ``env``: COMPCOLL_TIMEOUT=5 and a group timeout of 120 s: 5 s.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend_deadline.py group
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)

from torchrun_checks import Checks, R

CASE = sys.argv[1]
GROUP, WANT = {"group": (10, 10), "env": (120, 5)}[CASE]
checks = Checks(f"torchrun backend deadline {CASE}")
check = checks.check


def main() -> None:
    os.environ.pop("COMPCOLL_TIMEOUT", None)
    if CASE == "env":
        os.environ["COMPCOLL_TIMEOUT"] = str(WANT)
    dist.init_process_group("compcoll", timeout=timedelta(seconds=GROUP))
    store = dist.distributed_c10d._get_default_store()
    if R == 0:
        try:
            dist.all_reduce(torch.ones(50_000))
            check(False, "the allreduce rank 1 never joined returned")
        except Exception as exc:  # noqa: BLE001 - its words are what is checked
            check(f"no progress for {WANT} s" in str(exc),
                  f"the call gave up after {WANT} s: {type(exc).__name__}: {exc}")
        store.set("deadline checked", "1")
    else:
        store.wait(["deadline checked"], timedelta(seconds=300))
        check(True, "rank 1 stayed out of the call")


if __name__ == "__main__":
    checks.guarded("deadline", main)
    checks.finish()

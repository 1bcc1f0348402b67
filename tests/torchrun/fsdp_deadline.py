"""How long FSDP's compressed reduce-scatter waits: ``timeout=`` where given, else the
process group's own timeout (as long as FSDP itself would wait).

Rank 1 calls ``CompressedReduceScatter`` while rank 0 stays out; rank 1's call must give up
within a few seconds of the deadline in force, and say so; rank 0 then leaves without
joining:

* ``group``: gloo with a group timeout of 6 s: the call gives up after about 6 s;
* ``arg``: ``CompressedReduceScatter(timeout=3)`` and a group timeout of 120 s: about 3 s.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/fsdp_deadline.py group
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from collectives.fsdp import CompressedReduceScatter

from torchrun_checks import Checks, R

CASE = sys.argv[1]
GROUP, WANT = {"group": (6, 6), "arg": (120, 3)}[CASE]
#: how much later than the deadline the call may give up (the agreement's and the exchange's
#: waits each have it; a loaded machine schedules late)
SLACK = 8.0
checks = Checks(f"torchrun fsdp deadline {CASE}")
check = checks.check


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=GROUP))
    store = dist.distributed_c10d._get_default_store()
    rs = CompressedReduceScatter(compressor="uniform:bits=8",
                                 timeout=WANT if CASE == "arg" else None)
    x = torch.randn(2 * 40_000)  # compressed (above min_numel)
    if R == 1:
        t0 = time.monotonic()
        try:
            rs(torch.empty(40_000), x, dist.group.WORLD, dist.ReduceOp.SUM)
            check(False, "a reduce-scatter rank 0 never joined finished")
        except Exception as exc:  # noqa: BLE001 - its words are what is checked
            took = time.monotonic() - t0
            check(WANT - 0.5 <= took <= WANT + SLACK,
                  f"gave up after {took:.1f} s, the deadline is {WANT} s: "
                  f"{type(exc).__name__}: {exc}")
            words = str(exc).lower()
            check(any(w in words for w in ("timeout", "timed out", "no progress", "deadline")),
                  f"the error says it waited: {exc}")
        store.set("deadline checked", "1")
    else:
        store.wait(["deadline checked"], timedelta(seconds=300))
        check(True, "rank 0 stayed out of the reduce-scatter")


if __name__ == "__main__":
    checks.guarded("deadline", main)
    checks.finish()

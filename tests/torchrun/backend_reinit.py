"""The ``compcoll`` backend made again after ``destroy_process_group``, as gloo can be:
init, allreduce (compressed and gloo's own), destroy, several times over in one process, each
group's results exact (constants) and equal on every rank.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend_reinit.py
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)

from torchrun_checks import Checks, P, R

ROUNDS = 6
checks = Checks("torchrun backend reinit")
check = checks.check


def one_round(i: int) -> None:
    # a minute, not the default half hour: a group that cannot form fails the run in time
    dist.init_process_group("compcoll", timeout=timedelta(seconds=60))
    pg = dist.distributed_c10d._get_default_group()
    big = torch.full((50_000,), float(R + i))
    dist.all_reduce(big)
    want = sum(r + i for r in range(P))
    check(pg.compressed == 1 and bool((big == want).all()),
          f"round {i}: compressed sum of constants {big[:2].tolist()}, want {want}")
    small = torch.arange(5.0) + R
    dist.all_reduce(small)
    check(torch.equal(small, torch.arange(5.0) * P + P * (P - 1) / 2),
          f"round {i}: gloo's own sum {small.tolist()}")
    every = [torch.empty_like(big) for _ in range(P)]
    dist.all_gather(every, big)
    check(all(torch.equal(e, big) for e in every), f"round {i}: the same bits on every rank")
    dist.destroy_process_group()


def main() -> None:
    for i in range(ROUNDS):
        one_round(i)


if __name__ == "__main__":
    checks.guarded("reinit", main)
    checks.finish()

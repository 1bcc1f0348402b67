"""The ``compcoll`` backend on two hosts of two ranks (emulated through COMPCOLL_HOST under
torchrun): ranks 0, 1 on one host, 2, 3 on the other.

* DDP training of the digits CNN on "gloo" and on "compcoll" (the same batches): every DDP
  bucket goes through the compressed path, whether the library runs it two-level or flat;
  the parameters end with the same bits on every rank, and the final training loss is within
  10% + 0.01 of gloo's;
* the backend's own communicator runs a two-level compressed call (``hierarchy="two_level"``,
  on gloo sub-groups of its own): a sum of constants, exact, on every rank.

Run: torchrun --standalone --nproc-per-node 4 tests/torchrun/backend_hosts.py
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import collectives
import collectives.backend  # noqa: F401  (where torch's autoloading is off)
from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P, R
from torchrun_checks import train as train_steps

STEPS, BATCH = 60, 16
checks = Checks("torchrun backend hosts")
check = checks.check


def two_level_call() -> None:
    comm = dist.distributed_c10d._get_default_group()._communicator()
    x = torch.full((40_000,), float(R + 1))
    stats: dict = {}
    collectives.allreduce(x, comm=comm, out=x, compressor="uniform:bits=8",
                          hierarchy="two_level", stats=stats)
    check(stats.get("hierarchy") == "two_level", f"the call ran {stats.get('hierarchy')}")
    check(bool((x == P * (P + 1) / 2).all()), f"two-level sum of constants: {x[:3].tolist()}")


def train(backend: str) -> tuple[float, int]:
    dist.init_process_group(backend)
    t = task("cnn", 0)
    model = torch.nn.parallel.DistributedDataParallel(t.make())
    train_steps(model, t.train, STEPS, BATCH)
    x, y = t.train
    with torch.no_grad():  # the whole training set
        full = torch.nn.functional.cross_entropy(model.module(x), y).item()
    pg = dist.distributed_c10d._get_default_group()
    compressed = getattr(pg, "compressed", 0)
    if backend == "compcoll":
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        every = [torch.empty_like(flat) for _ in range(P)]
        dist.all_gather(every, flat)
        check(all(torch.equal(e, flat) for e in every), "parameters: the same bits everywhere")
        two_level_call()
    dist.destroy_process_group()
    return full, compressed


def main() -> None:
    os.environ["COMPCOLL_HOST"] = f"host{R // 2}"  # read when the group is made
    plain, _ = train("gloo")
    ours, compressed = train("compcoll")
    check(compressed >= STEPS, f"DDP's buckets went through the compressed path "
                               f"({compressed} compressed calls in {STEPS} steps)")
    check(ours <= plain * 1.1 + 0.01, f"training loss {ours:.4f} on compcoll, "
                                       f"{plain:.4f} on gloo (within 10% + 0.01)")
    if R == 0:
        print(f"backend hosts training: gloo loss {plain:.4f}, compcoll loss {ours:.4f}",
              flush=True)


if __name__ == "__main__":
    checks.guarded("hosts", main)
    checks.finish()

"""The ``compcoll`` torch.distributed backend under torchrun: only the backend string changes.

* collectives on the compressed group: a large float SUM allreduce is compressed (within the
  8-bit quantizer's error of the exact sum, the same bits on every rank); small, integer,
  MAX and AVG allreduces, broadcast, all_gather and barrier are exact;
* the same DDP training (real data: the digits CNN, Adam, the same batches) on "gloo" and on
  "compcoll": every DDP bucket goes through the compressed path, and the final training loss
  (on the whole training set, after 150 steps) is within 10% + 0.01 of the uncompressed
  run's.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)
from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P, R
from torchrun_checks import train as train_steps

STEPS, BATCH = 150, 16
checks = Checks("torchrun backend")
check = checks.check


def same_on_every_rank(t: torch.Tensor, what: str) -> None:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t)
    check(all(torch.equal(e, every[0]) for e in every), f"{what}: the same bits on every rank")


def collectives_on_the_group() -> None:
    pg = dist.distributed_c10d._get_default_group()
    check(dist.get_backend() == "compcoll", f"backend is {dist.get_backend()}")
    g = torch.Generator().manual_seed(R)
    x = torch.randn(100_003, generator=g)
    parts = [torch.empty_like(x) for _ in range(P)]
    dist.all_gather(parts, x)  # exact (gloo's own): the oracle
    exact = torch.stack(parts).double().sum(0)
    before = pg.compressed
    y = x.clone()
    dist.all_reduce(y)
    check(pg.compressed == before + 1, "a large float sum takes the compressed path")
    err = (y.double() - exact).abs().max().item()
    bound = sum((p.max() - p.min()).item() for p in parts) / 255 * 1.01
    check(err <= bound, f"8-bit sum within the quantizer's steps: error {err:.3g}, "
                        f"bound {bound:.3g}")
    check(err > 0, "the large sum really was quantized")
    same_on_every_rank(y, "compressed sum")
    a = torch.full((100_003,), float(R + 1))
    work = dist.all_reduce(a, async_op=True)
    work.wait()
    check(bool((a == P * (P + 1) / 2).all()), "async compressed sum of constants is exact")
    small = torch.arange(10.0) * (R + 1)
    dist.all_reduce(small)
    check(torch.equal(small, torch.arange(10.0) * P * (P + 1) / 2), "small tensor: exact")
    ints = torch.full((50_000,), R + 1, dtype=torch.int64)
    dist.all_reduce(ints)
    check(bool((ints == P * (P + 1) // 2).all()), "integer tensor: exact")
    mx = torch.full((50_000,), float(R))
    dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    check(bool((mx == P - 1).all()), "MAX: gloo's own")
    b = torch.tensor([R * 10])
    dist.broadcast(b, src=P - 1)
    check(b.item() == (P - 1) * 10, "broadcast")
    dist.barrier()


def train(backend: str) -> tuple[float, int]:
    dist.init_process_group(backend)
    t = task("cnn", 0)
    model = torch.nn.parallel.DistributedDataParallel(t.make())
    train_steps(model, t.train, STEPS, BATCH)
    x, y = t.train
    with torch.no_grad():  # the whole training set, the same on every rank
        full = torch.nn.functional.cross_entropy(model.module(x), y).item()
    pg = dist.distributed_c10d._get_default_group()
    compressed = getattr(pg, "compressed", 0)
    if backend == "compcoll":
        collectives_on_the_group()
    dist.destroy_process_group()
    return full, compressed


def main() -> None:
    plain, _ = train("gloo")
    ours, compressed = train("compcoll")
    check(compressed >= STEPS, f"DDP's buckets went through the compressed path "
                               f"({compressed} compressed calls in {STEPS} steps)")
    check(ours <= plain * 1.1 + 0.01, f"training loss {ours:.4f} on compcoll, "
                                       f"{plain:.4f} on gloo (within 10% + 0.01)")
    if R == 0:
        print(f"backend training: gloo loss {plain:.4f}, compcoll loss {ours:.4f}", flush=True)


if __name__ == "__main__":
    checks.guarded("backend", main)
    checks.finish()

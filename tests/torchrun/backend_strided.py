"""All-reduce of strided tensors through the ``compcoll`` backend: a column slice and a
transpose, compressed (large) and gloo's own (small, integer, AVG), each reduced as the tensor
it is, the elements between its strides untouched.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend_strided.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import collectives.backend  # noqa: F401  (where torch's autoloading is off)

from torchrun_checks import Checks, P, R

checks = Checks("torchrun backend strided")
check = checks.check
TOTAL = P * (P + 1) / 2  # the sum of R + 1 over the ranks


def exact_sum(t: torch.Tensor) -> torch.Tensor:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t.contiguous())
    return torch.stack(every).double().sum(0)


def column_slice(rows: int, cols: int, compressed: bool) -> None:
    pg = dist.distributed_c10d._get_default_group()
    base = torch.full((rows, 2 * cols), -7.0)
    view = base[:, ::2]
    view.copy_(torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) % 5 + 1)
    want = exact_sum(view)
    before = pg.compressed
    dist.all_reduce(view)
    label = f"{rows}x{cols} slice t[:, ::2]"
    check((pg.compressed == before + 1) == compressed,
          f"{label}: compressed path taken {pg.compressed - before} times")
    # gloo's own: exact; 8 bits: within one quantization step of each rank's values (1..5)
    bound = P * 4 / 255 * 1.01 if compressed else 0.0
    err = (view.double() - want).abs().max().item()
    check(err <= bound, f"{label}: sums {view[0, :4].tolist()}, want {want[0, :4].tolist()} "
                        f"(error {err:.3g}, bound {bound:.3g})")
    check(bool((base[:, 1::2] == -7.0).all()), f"{label}: the columns between untouched")


def transposed(n: int, compressed: bool) -> None:
    pg = dist.distributed_c10d._get_default_group()
    g = torch.Generator().manual_seed(R)
    t = torch.randn(n, 2 * n, generator=g).t()  # strided, no gaps
    parts = [torch.empty_like(t.contiguous()) for _ in range(P)]
    dist.all_gather(parts, t.contiguous())
    exact = torch.stack(parts).double().sum(0)
    before = pg.compressed
    dist.all_reduce(t)
    err = (t.double() - exact).abs().max().item()
    bound = sum((p.max() - p.min()).item() for p in parts) / 255 * 1.01 if compressed else 1e-5
    check((pg.compressed == before + 1) == compressed, f"transpose {n}: compressed path")
    check(err <= bound, f"transpose {n}: error {err:.3g}, bound {bound:.3g} (in place, in "
                        "its own layout)")
    every = [torch.empty_like(t.contiguous()) for _ in range(P)]
    dist.all_gather(every, t.contiguous())
    check(all(torch.equal(e, every[0]) for e in every), f"transpose {n}: the same bits")


def others() -> None:
    base = torch.full((6, 8), -1, dtype=torch.int64)
    view = base[::2, 1::2]
    view.fill_(R + 1)
    dist.all_reduce(view)
    check(bool((view == TOTAL).all()) and bool((base[1::2] == -1).all())
          and bool((base[:, ::2] == -1).all()), f"integers: {base.tolist()}")
    fb = torch.full((4, 6), 9.0)
    view = fb[:, :3]
    view.fill_(float(R + 1))
    dist.all_reduce(view, op=dist.ReduceOp.AVG)
    check(bool((view == TOTAL / P).all()) and bool((fb[:, 3:] == 9.0).all()),
          f"AVG: {fb.tolist()}")
    async_base = torch.full((200, 300), 5.0)
    view = async_base[:, :150]
    view.fill_(float(R + 1))
    dist.all_reduce(view, async_op=True).wait()
    check(bool((view == TOTAL).all()) and bool((async_base[:, 150:] == 5.0).all()),
          "async compressed sum of a strided view")


def main() -> None:
    dist.init_process_group("compcoll")
    column_slice(200, 150, compressed=True)
    column_slice(10, 12, compressed=False)
    transposed(100, compressed=True)
    transposed(7, compressed=False)
    others()
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("strided", main)
    checks.finish()

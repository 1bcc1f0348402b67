"""The ``compcoll`` backend's other collectives and compressors under torchrun, against gloo.

* ``reduce_scatter_tensor``, ``all_gather_into_tensor`` (blocking, ``async_op=True`` and
  coalesced), ``all_to_all_single`` and torch's functional collectives on the compcoll group
  give gloo's results bit for bit;
  FSDP2 (which runs on them) trains a few steps on compcoll with gloo's losses;
* AVG of an integer tensor is refused (allreduce and reduce-scatter, blocking and async), as
  gloo refuses it; AVG of a small float tensor is exact;
* ``randomk`` and ``powersgd`` on the backend (groups made after ``configure``): fresh tensors
  every call, every rank the same bits; random-k keeps the exact sum at the coordinates it
  picks (the same on every rank) and zero elsewhere; PowerSGD's rank-1 sum of rank-1
  matrices is the true sum; random-k with error feedback keeps one residual for the one
  tensor it reduces;
* two compressed calls of the same shape in flight at once both give the right sums.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend_ops.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import collectives.backend

from torchrun_checks import Checks, P, R

checks = Checks("torchrun backend ops")
check = checks.check


def gathered(t: torch.Tensor) -> list[torch.Tensor]:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t)
    return every


def refused(what: str, call) -> None:  # noqa: ANN001
    try:
        work = call()
        if work is not None:
            work.wait()
        check(False, f"{what}: refused")
    except ValueError as exc:
        check("AVG" in str(exc) and "int64" in str(exc), f"{what}: refused, naming it: {exc}")


def tensor_collectives(gloo: dist.ProcessGroup) -> None:
    g = torch.Generator().manual_seed(R)
    x = torch.randn(P * 1000, generator=g)
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        ours, theirs = torch.empty(1000), torch.empty(1000)
        dist.reduce_scatter_tensor(ours, x, op=op)
        dist.reduce_scatter_tensor(theirs, x, op=op, group=gloo)
        check(torch.equal(ours, theirs), f"reduce_scatter_tensor {op}: gloo's result")
    ints = torch.arange(P * 10, dtype=torch.int64) * (R + 1)
    ours, theirs = torch.empty(10, dtype=torch.int64), torch.empty(10, dtype=torch.int64)
    dist.reduce_scatter_tensor(ours, ints)
    dist.reduce_scatter_tensor(theirs, ints, group=gloo)
    check(torch.equal(ours, theirs), "reduce_scatter_tensor of integers: gloo's result")
    ours, theirs = torch.empty(P * 1000), torch.empty(P * 1000)
    work = dist.all_gather_into_tensor(ours, x[:1000], async_op=True)
    dist.all_gather_into_tensor(theirs, x[:1000], group=gloo)
    check(work.wait() is True and torch.equal(ours, theirs), "all_gather_into_tensor (async)")
    outs = [torch.empty(P * 100), torch.empty(P * 50)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], x[:100])
        dist.all_gather_into_tensor(outs[1], x[100:150])
    cm.wait()
    for out, (lo, hi) in zip(outs, ((0, 100), (100, 150)), strict=True):
        want = torch.cat([e[lo:hi] for e in gathered(x)])
        check(torch.equal(out, want), f"coalesced all_gather_into_tensor [{lo}:{hi}]")
    rs = [torch.empty(100), torch.empty(50)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(rs[0], x[:P * 100])
        dist.reduce_scatter_tensor(rs[1], x[:P * 50])
    cm.wait()
    for out, m in zip(rs, (100, 50), strict=True):
        want = torch.empty(m)
        dist.reduce_scatter_tensor(want, x[:P * m], group=gloo)
        check(torch.equal(out, want), f"coalesced reduce_scatter_tensor of {m}")
    ours, theirs = torch.empty(P * 7), torch.empty(P * 7)
    dist.all_to_all_single(ours, x[:P * 7])
    dist.all_to_all_single(theirs, x[:P * 7], group=gloo)
    check(torch.equal(ours, theirs), "all_to_all_single: gloo's result")
    # torch's functional collectives reach the group from C++
    import torch.distributed._functional_collectives as fc

    world = dist.group.WORLD
    ours = fc.wait_tensor(fc.all_gather_tensor(x[:10], 0, world))
    theirs = fc.wait_tensor(fc.all_gather_tensor(x[:10], 0, gloo))
    check(torch.equal(ours, theirs), "functional all_gather_tensor: gloo's result")
    ours = fc.wait_tensor(fc.reduce_scatter_tensor(x[:P * 10], "sum", 0, world))
    theirs = fc.wait_tensor(fc.reduce_scatter_tensor(x[:P * 10], "sum", 0, gloo))
    check(torch.equal(ours, theirs), "functional reduce_scatter_tensor: gloo's result")


def averages() -> None:
    t = torch.full((4,), R + 4, dtype=torch.int64)
    refused("integer AVG allreduce", lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG))
    refused("integer AVG allreduce, async",
            lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True))
    big = torch.full((50_000,), R + 4, dtype=torch.int64)
    refused("large integer AVG allreduce", lambda: dist.all_reduce(big, op=dist.ReduceOp.AVG))
    refused("integer AVG reduce_scatter_tensor",
            lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.int64),
                                               torch.ones(2 * P, dtype=torch.int64),
                                               op=dist.ReduceOp.AVG))
    check(bool((t == R + 4).all()), "a refused AVG leaves the tensor alone")
    f = torch.full((4,), float(R + 4))
    work = dist.all_reduce(f, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    check(bool((f == 4 + (P - 1) / 2).all()), f"small float AVG: exact ({f.tolist()})")


def fsdp_on_compcoll(gloo: dist.ProcessGroup) -> None:
    """FSDP2 on the default (compcoll) group: the same losses as on gloo."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    losses = {}
    for name, group in (("compcoll", dist.group.WORLD), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4))
        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), 0.1)
        gen = torch.Generator().manual_seed(R)
        run = []
        for _ in range(3):
            x, y = torch.randn(8, 32, generator=gen), torch.randint(0, 4, (8,), generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses[name] = run
    check(losses["compcoll"] == losses["gloo"], f"FSDP2 on compcoll: gloo's losses {losses}")


def compressors_with_shared_randomness() -> None:
    n = 1 << 15
    collectives.backend.configure("randomk:ratio=0.25")
    group = dist.new_group(backend="compcoll")
    collectives.backend.configure("powersgd:rank=1")
    low_rank = dist.new_group(backend="compcoll")
    collectives.backend.configure("uniform:bits=8")  # what groups made later get
    g = torch.Generator().manual_seed(10 + R)
    for step in range(3):
        x = torch.randn(n, generator=g)  # a fresh tensor every call
        exact = torch.stack(gathered(x)).double().sum(0)
        y = x.clone()
        dist.all_reduce(y, group=group)
        same = all(torch.equal(e, y) for e in gathered(y))
        picked = y != 0
        near = torch.allclose(y[picked].double(), exact[picked], rtol=1e-5, atol=1e-5)
        share = picked.double().mean().item()
        check(same and near and 0.2 < share < 0.3,
              f"randomk call {step}: same bits on every rank ({same}), exact sum where "
              f"picked ({near}), {share:.3f} of the coordinates picked")
        u = torch.randn(256, 1, generator=torch.Generator().manual_seed(step))
        v = torch.randn(1, 128, generator=torch.Generator().manual_seed(100 + step))
        m = (R + 1.0) * u @ v
        dist.all_reduce(m, group=low_rank)
        want = P * (P + 1) / 2 * (u @ v)
        err = ((m - want).norm() / want.norm()).item()
        check(err < 1e-4 and all(torch.equal(e, m) for e in gathered(m)),
              f"powersgd call {step}: rank-1 sum within {err:.2g} of the truth, same bits")
    check(group.compressed == 3 and low_rank.compressed == 3,
          f"both compressed every call ({group.compressed}, {low_rank.compressed})")
    collectives.backend.configure("randomk:ratio=0.25", feedback=True)
    with_feedback = dist.new_group(backend="compcoll")
    collectives.backend.configure("uniform:bits=8", feedback=False)
    x = torch.randn(n, generator=g)
    y = torch.empty_like(x)  # one tensor, one address: one residual
    for step in range(3):
        y.copy_(x)
        dist.all_reduce(y, group=with_feedback)
        check(all(torch.equal(e, y) for e in gathered(y)),
              f"randomk with feedback, call {step}: same bits on every rank")
    check(len(with_feedback.session.scopes()) == 1, "randomk with feedback: one residual")


def same_shape_in_flight() -> None:
    """Two compressed calls of one shape in flight at once: both right (constants are
    exact through the 8-bit quantizer)."""
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.full((50_000,), float(R + 1), dtype=dtype)
        b = torch.full((50_000,), 2.0 * (R + 1), dtype=dtype)
        first = dist.all_reduce(a, async_op=True)
        second = dist.all_reduce(b, async_op=True)
        second.wait()
        first.wait()
        want = P * (P + 1) / 2
        check(bool((a == want).all()) and bool((b == 2 * want).all()),
              f"{dtype} of one shape in flight: both sums right ({a[0].item()}, "
              f"{b[0].item()})")


def main() -> None:
    dist.init_process_group("compcoll")
    gloo = dist.new_group(backend="gloo")
    tensor_collectives(gloo)
    averages()
    same_shape_in_flight()
    fsdp_on_compcoll(gloo)
    compressors_with_shared_randomness()
    dist.barrier()


if __name__ == "__main__":
    checks.guarded("backend ops", main)
    checks.finish()

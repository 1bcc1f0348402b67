"""The compressed reduce-scatter for FSDP2 on two hosts of two ranks (emulated through
COMPCOLL_HOST under torchrun, gloo), checked on every rank.

"2x2": ranks 0, 1 on one host and 2, 3 on the other; "2x2-interleaved": ranks 0, 2 and 1, 3.
* the call runs two-level (``calls["two_level"]``): with ``none`` it is the exact
  reduce-scatter up to summation order; in 8 bits each rank's shard is within one
  quantization step of each host's sum of it (the host sums are what cross hosts), float32
  and bfloat16, SUM and AVG; equal inputs give the same bits twice;
* ``hierarchy="flat"`` keeps the flat call; ranks that disagree on the hierarchy raise
  ``MismatchError`` naming it;
* FSDP2 training of the digits CNN with ``compress_reduce_scatter`` (every layer, two-level)
  ends within 10% + 0.01 of the loss of FSDP's own reduce-scatter.

Run: torchrun --standalone --nproc-per-node 4 tests/torchrun/fsdp_two_level.py 2x2
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from collectives import MismatchError
from collectives.fsdp import CompressedReduceScatter, compress_reduce_scatter
from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P, R

LAYOUT = sys.argv[1] if len(sys.argv) > 1 else "2x2"
HOSTS = [[0, 2], [1, 3]] if LAYOUT == "2x2-interleaved" else [[0, 1], [2, 3]]
checks = Checks(f"torchrun fsdp two-level {LAYOUT}")
check = checks.check


def gathered(t: torch.Tensor) -> list[torch.Tensor]:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t)
    return every


def one_call(rs: CompressedReduceScatter, x: torch.Tensor, op: object, scale: float,
             label: str) -> torch.Tensor:
    m = x.numel() // P
    out = torch.empty(m, dtype=x.dtype)
    before = dict(rs.calls)
    rs(out, x, dist.group.WORLD, op)
    mine = [e.double().reshape(P, m)[R] for e in gathered(x)]  # every rank's chunk for me
    ref = sum(mine) * scale
    ulp = 2.0 ** -7 if x.dtype == torch.bfloat16 else 2.0 ** -20
    if rs.compressor.name == "none":
        bound = ulp * ref.abs().max().item() + 1e-6
    else:  # each host's sum of my chunk is quantized once, by its local rank of my index
        sums = [sum(mine[r] for r in host) for host in HOSTS]
        bound = 1.01 * sum((s.max() - s.min()).item() / 255 for s in sums) * abs(scale) \
            + ulp * ref.abs().max().item()
    err = (out.double() - ref).abs().max().item()
    check(err <= bound, f"{label}: error {err:.3g}, bound {bound:.3g}")
    check(rs.calls["two_level"] == before["two_level"] + 1,
          f"{label}: two-level call ({rs.calls})")
    return out


def collective_alone() -> None:
    g = torch.Generator().manual_seed(300 + R)
    n = P * 20_011
    x = torch.randn(n, generator=g)
    one_call(CompressedReduceScatter("none", error_feedback=False), x, dist.ReduceOp.SUM,
             1.0, "none, sum")
    for ef in (False, True):
        rs = CompressedReduceScatter(error_feedback=ef)
        for dtype in (torch.float32, torch.bfloat16):
            xd = torch.randn(n, generator=g).to(dtype)
            one_call(rs, xd, dist.ReduceOp.AVG, 1.0 / P, f"8-bit avg {dtype} feedback={ef}")
        if ef:
            check(all(k.endswith("@cross") for k in rs.feedback.residuals),
                  f"the residuals are the cross-host step's: {list(rs.feedback.residuals)}")
    same = torch.randn(n, generator=torch.Generator().manual_seed(7))
    a = one_call(CompressedReduceScatter(error_feedback=False), same, dist.ReduceOp.SUM, 1.0,
                 "equal inputs")
    b = one_call(CompressedReduceScatter(error_feedback=False), same, dist.ReduceOp.SUM, 1.0,
                 "equal inputs again")
    check(torch.equal(a, b), "the same call twice: the same bits")
    flat = CompressedReduceScatter(error_feedback=False, hierarchy="flat")
    flat(torch.empty(n // P), x, dist.group.WORLD, dist.ReduceOp.SUM)
    check(flat.calls == {"compressed": 1, "plain": 0, "two_level": 0}, f"flat: {flat.calls}")
    try:
        CompressedReduceScatter(hierarchy="tree")
        check(False, "hierarchy='tree' was accepted")
    except ValueError as exc:
        check("auto, flat, two_level" in str(exc), f"unclear refusal: {exc}")


def mismatch() -> None:
    """Last: a refused call leaves the communicator unusable."""
    n = P * 20_011
    odd = CompressedReduceScatter(hierarchy="flat" if R == 1 else "auto")
    try:
        odd(torch.empty(n // P), torch.ones(n), dist.group.WORLD, dist.ReduceOp.SUM)
        check(False, "ranks disagreeing on the hierarchy went ahead")
    except MismatchError as exc:
        check("hierarchy" in str(exc), f"the mismatch names the hierarchy: {exc}")


def train(compressed: bool, steps: int = 30, batch: int = 16) -> float:
    t = task("cnn", 0)
    model = t.make()
    for layer in model.children():
        fully_shard(layer)
    fully_shard(model)
    comms = compress_reduce_scatter(model, min_numel=0) if compressed else []
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    x, y = t.train
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (P * batch,), generator=g)[R * batch:(R + 1) * batch]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    if compressed:
        calls = sum(c.calls["two_level"] for c in comms)
        # the digits CNN's four layers each reduce-scatter once a step (the root holds none)
        check(calls == sum(c.calls["compressed"] for c in comms) == 4 * steps,
              f"training: every call two-level ({calls} of {4 * steps})")
    with torch.no_grad():
        return torch.nn.functional.cross_entropy(model(x), y).item()


def training() -> None:
    plain, ours = train(False), train(True)
    check(ours <= plain * 1.1 + 0.01, f"training loss {ours:.4f} two-level 8-bit, {plain:.4f} "
                                       "default (10% + 0.01)")
    if R == 0:
        print(f"fsdp two-level training losses: default {plain:.4f}, ours {ours:.4f}",
              flush=True)


def main() -> None:
    os.environ["COMPCOLL_HOST"] = f"fsdp {LAYOUT}/host{[R in h for h in HOSTS].index(True)}"
    dist.init_process_group("gloo")
    collective_alone()
    training()
    mismatch()
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("fsdp two-level", main)
    checks.finish()

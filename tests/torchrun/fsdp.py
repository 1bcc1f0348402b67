"""The compressed reduce-scatter for FSDP2 under torchrun (gloo), checked on every rank.

* the collective alone against the exact ``reduce_scatter_tensor`` of the same inputs: every
  rank's shard within the 8-bit quantizer's steps (SUM, AVG, PREMUL_SUM; float32 and
  bfloat16), identical bits on every rank for the same inputs; small inputs and ``none`` exact
  up to summation order; unsupported reductions refused;
* FSDP2 training of the digits CNN (Adam, the same batches; fully_shard per layer and the
  root): FSDP's own reduce-scatter, then ``compress_reduce_scatter`` (an instance per module,
  error feedback; only the large layer compressed, then every layer) and one shared
  ``CompressedReduceScatter`` without feedback; the custom comm compresses every step, and the
  final loss on the whole training set is within 10% + 0.01 of the default run's.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/fsdp.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard

from collectives import Session
from collectives.fsdp import CompressedReduceScatter, compress_reduce_scatter
from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P, R

STEPS, BATCH = 30, 16
checks = Checks("torchrun fsdp")
check = checks.check


def gathered(t: torch.Tensor) -> list[torch.Tensor]:
    every = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(every, t)
    return every


def exact(x: torch.Tensor) -> torch.Tensor:
    """gloo's reduce-scatter (SUM) of the same input, in float32 (exact for bfloat16 inputs
    on a few ranks)."""
    out = torch.empty(x.numel() // P)
    dist.reduce_scatter_tensor(out, x.float(), op=dist.ReduceOp.SUM)
    return out.double()


def one_call(rs: CompressedReduceScatter, x: torch.Tensor, op: object, scale: float,
             label: str, async_op: bool = False) -> None:
    """One call against the exact sum. Without feedback each rank's chunk for this owner is
    off by at most one quantization step of that chunk; with feedback the residual carried in
    and the one kept back add up to two steps of the compensated chunk (a little wider)."""
    m = x.numel() // P
    out = torch.empty(m, dtype=x.dtype)
    before = dict(rs.calls)
    ret = rs(out, x, dist.group.WORLD, op, async_op=async_op)
    if async_op:
        ret.wait()
    else:
        check(ret is None, f"{label}: a synchronous call returns None")
    ref = exact(x) * scale
    chunks = [e.double().reshape(P, m)[R] for e in gathered(x)]
    step = sum((c.max() - c.min()).item() / 255 for c in chunks) * abs(scale)
    ulp = 2.0 ** -7 if x.dtype == torch.bfloat16 else 2.0 ** -23  # final rounding to x.dtype
    bound = step * (2.2 if rs.feedback is not None else 1.01) + ulp * ref.abs().max().item()
    err = (out.double() - ref).abs().max().item()
    check(err <= bound, f"{label}: shard within the 8-bit steps: error {err:.3g}, bound "
                        f"{bound:.3g}")
    check(err > 0, f"{label}: the shard really was quantized")
    check(rs.calls["compressed"] == before["compressed"] + 1, f"{label}: compressed path")


def collective_alone() -> None:
    g = torch.Generator().manual_seed(100 + R)
    n = P * 20_011
    for ef in (True, False):
        rs = CompressedReduceScatter(error_feedback=ef)
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(n, generator=g).to(dtype)
            for op, scale, name in ((dist.ReduceOp.SUM, 1.0, "sum"),
                                    (dist.ReduceOp.AVG, 1.0 / P, "avg"),
                                    (dist.ReduceOp.PREMUL_SUM(0.25), 0.25, "premul 0.25")):
                one_call(rs, x, op, scale, f"{name} {dtype} feedback={ef}")
            one_call(rs, x, dist.ReduceOp.AVG, 1.0 / P, f"async avg {dtype}", async_op=True)
    # error feedback: what one call misses the next sends, so over K calls on the same input
    # the error of the total stays within the two residuals at its ends, not K steps
    rs = CompressedReduceScatter()
    x = torch.randn(n, generator=g)
    total, out = torch.zeros(n // P, dtype=torch.float64), torch.empty(n // P)
    for _ in range(8):
        rs(out, x, dist.group.WORLD, dist.ReduceOp.SUM)
        total += out.double()
    step = sum((e.reshape(P, n // P)[R].max() - e.reshape(P, n // P)[R].min()).item() / 255
               for e in gathered(x))
    err = (total - 8 * exact(x)).abs().max().item()
    check(err <= 2.2 * step, f"feedback: 8 calls' total within two steps ({err:.3g}, step "
                             f"{step:.3g})")
    check(len(rs.feedback.residuals) == 1, "feedback: one residual for the one input size")
    # the same input on every rank: the same sum, so the same shards bit for bit
    same = torch.randn(n, generator=torch.Generator().manual_seed(7))
    out = torch.empty(n // P)
    CompressedReduceScatter(error_feedback=False)(out, same, dist.group.WORLD,
                                                  dist.ReduceOp.SUM)
    full = torch.cat(gathered(out))
    again = torch.empty(n // P)
    CompressedReduceScatter(error_feedback=False)(again, same, dist.group.WORLD,
                                                  dist.ReduceOp.SUM)
    check(torch.equal(out, again), "the same call twice: the same bits")
    check(bool(((full.double() - P * same.double()).abs() <= P * (same.max() - same.min())
                / 255 * 1.01).all()), "equal inputs: every shard near p * input")
    # the none compressor: exact up to summation order
    x = torch.randn(n, generator=g)
    out = torch.empty(n // P)
    CompressedReduceScatter("none", error_feedback=False)(out, x, dist.group.WORLD,
                                                          dist.ReduceOp.AVG)
    ref = exact(x) / P
    check(bool(torch.allclose(out.double(), ref, rtol=1e-6, atol=1e-6)), "none: exact")
    # small inputs: gloo's own, exact, with the factor
    rs = CompressedReduceScatter()
    small = torch.arange(P * 10, dtype=torch.float32) * (R + 1)
    out = torch.empty(10)
    rs(out, small, dist.group.WORLD, dist.ReduceOp.AVG)
    want = torch.arange(P * 10, dtype=torch.float32).reshape(P, 10)[R] * (P + 1) / 2
    check(torch.equal(out, want), "small input: exact average")
    check(rs.calls == {"compressed": 0, "plain": 1, "two_level": 0},
          f"small input: plain path {rs.calls}")
    try:
        rs(torch.empty(n // P), x, dist.group.WORLD, dist.ReduceOp.MAX)
        check(False, "MAX is refused")
    except ValueError as exc:
        check("MAX" in str(exc) and "SUM" in str(exc), f"MAX refused, naming it: {exc}")


def train(comm: str, **options: object) -> tuple[float, list[CompressedReduceScatter]]:
    """Train with FSDP's default reduce-scatter (comm "default"), one shared
    CompressedReduceScatter ("shared") or one per FSDP module ("per module")."""
    t = task("cnn", 0)
    model = t.make()
    for layer in model.children():
        fully_shard(layer)
    fully_shard(model)
    comms: list[CompressedReduceScatter] = []
    if comm == "per module":
        comms = compress_reduce_scatter(model, **options)  # type: ignore[arg-type]
    elif comm == "shared":
        comms = [CompressedReduceScatter(**options)]  # type: ignore[arg-type]
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_custom_reduce_scatter(comms[0])
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    x, y = t.train
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        idx = torch.randint(0, len(x), (P * BATCH,), generator=g)[R * BATCH:(R + 1) * BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    with torch.no_grad():  # the whole training set, the same on every rank
        return torch.nn.functional.cross_entropy(model(x), y).item(), comms


def training() -> None:
    plain, _ = train("default")
    line = [f"default {plain:.4f}"]
    # the digits CNN's layers: conv1 160, conv2 4640, fc1 32832, fc2 650 parameters; by
    # default only fc1 (>= 16384) is compressed, with min_numel=0 all four are
    for comm, options, compressed in (
            ("per module", {}, 1),
            ("per module", {"min_numel": 0}, 4),
            ("shared", {"error_feedback": False}, 1)):
        label = f"{comm} {options}"
        ours, comms = train(comm, **options)
        line.append(f"{label} {ours:.4f}")
        calls = sum(c.calls["compressed"] for c in comms)
        check(calls == compressed * STEPS, f"{label}: the custom reduce-scatter compressed "
              f"{compressed} layer(s) every step ({calls} calls in {STEPS} steps)")
        check(ours <= plain * 1.1 + 0.01, f"{label}: training loss {ours:.4f} compressed, "
                                           f"{plain:.4f} default (10% + 0.01)")
        for c in comms:  # one store (the session's); each module's residual under its name
            if c.feedback is not None:
                n = sum(k.startswith(f"{c.name}/") for k in c.feedback.residuals)
                check(n <= 1, f"{label}: one residual per module ({c.name}: {n})")
        if comm == "per module":
            session = comms[0].session
            check(all(c.session is session for c in comms), f"{label}: one shared session")
            again = Session(session.spec, min_numel=session.min_numel)
            again.load_state_dict(session.state_dict())
            held, back = session.held(session.spec), again.held(again.spec)
            check(held is not None and back is not None and held.residuals.keys() ==
                  back.residuals.keys() and all(torch.equal(torch.from_numpy(v), torch.from_numpy(
                      back.residuals[k])) for k, v in held.residuals.items()),
                  f"{label}: the session's state_dict restores every module's residual")
        losses = torch.tensor([plain, ours])
        check(all(torch.equal(e, losses) for e in gathered(losses)),
              f"{label}: the same losses on every rank")
    if R == 0:
        print("fsdp training losses: " + ", ".join(line), flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    collective_alone()
    training()
    dist.destroy_process_group()


if __name__ == "__main__":
    checks.guarded("fsdp", main)
    checks.finish()

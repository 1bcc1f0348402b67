"""The DDP compression hook against DDP without a hook, on a gloo process group (and MPI).

Run: mpiexec -n P python tests/mpi/ddp_hook.py
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from ddp_common import backward, batch, grads, init_gloo, make, order_bound, within
from mpi4py import MPI

import collectives.ddp as cddp
from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, Rules
from collectives.transport.torch_dist import TorchCommunicator

from common import WORLD, Checker

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)  # ~1 Gbit/s: compression pays


#: How a case compares with DDP: "exact" (the same additions in the same order: the engine's
#: own allreduce over the same buffer), "order" (the same terms added in another order:
#: within ``order_bound``) or a relative tolerance for a lossy compressor.
Match = str | float


def close(chk: Checker, a: dict, b: dict, match: Match, step: int, what: str) -> None:
    bound = order_bound(step) if match == "order" else None
    for name in a:
        if match == "exact":
            ok = torch.equal(a[name], b[name])
        elif bound is not None:
            ok = within(a[name], b[name], bound[name])
        else:
            ok = torch.allclose(a[name], b[name], rtol=float(match), atol=float(match))
        err = float((a[name] - b[name]).abs().max())
        chk.check(ok, f"{what}: {name} differs by {err:.3g} ({match})")
        chk.identical(a[name].numpy(), f"{what}: {name}")


def compare(chk: Checker, policy, match: Match, what: str, cap: float = 0.004,
            **kw) -> cddp.CompressionState:
    plain, hooked = make(cap), make(cap)
    state = cddp.CompressionState(policy=policy, **kw).bind(hooked)
    hooked.register_comm_hook(state, cddp.compression_hook)
    for step in range(4):  # step 0 and the steps after DDP rebuilt its buckets
        backward(plain, step)
        backward(hooked, step)
        close(chk, grads(plain), grads(hooked), match, step, f"{what} step {step}")
    return state


def main() -> None:
    chk = Checker("ddp hook")
    init_gloo()
    # The identity twin through gloo's own allreduce: fused members follow the model's order,
    # a copy where the bucket holds them otherwise (DDP's first buckets, some later ones), and
    # gloo's ring adds an element's terms in an order set by where it lies in the buffer.
    st = chk.run("none", compare, chk, "none", "order", "none")
    if st is not None:
        buckets = {r["bucket"] for r in st.timeline}
        chk.check(len(buckets) > 1, f"several buckets ({buckets})")
        ov = cddp.overlap(st)
        chk.check(ov["steps"] == 4 and ov["comm_s"] > 0 and 0 <= ov["overlap"] <= 1, f"{ov}")
    chk.run("none, no error feedback", compare, chk, "none", "order", "none no-EF",
            error_feedback=False)
    # MPI_Allreduce adds in its own order (gloo's differs at 3 ranks)
    chk.run("none over MPI", compare, chk, "none", "order", "none MPI",
            process_group=MPI.COMM_WORLD)
    # "none:" is sent by the algorithm the cost model picks, the split groups from copies
    mixed = Rules([("kind=1d", "none"), ("name~fc2", "none"), ("*", "none:")])
    chk.run("none, fused and split", compare, chk, mixed, "order", "none mixed")
    chk.run("fp16", compare, chk, "fp16", 1e-3, "fp16", cap=25.0)
    # warm-up steps send DDP's own bucket buffer through gloo's allreduce: DDP's additions
    warm = chk.run("warm-up", compare, chk, "uniform:bits=8", "exact", "warm-up", cap=25.0,
                   start_step=4)
    if warm is not None:
        chk.check(all("groups" not in r for r in warm.timeline), "warm-up sent uncompressed")
    chk.run("span", span, chk)
    chk.run("ordered", ordered, chk)
    chk.run("rules", rules, chk)
    chk.run("non-finite", nonfinite, chk)
    chk.run("auto", auto, chk)
    chk.run("auto, ranks timing apart", auto_noisy, chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


def span(chk: Checker) -> None:
    """A sparsifier's group with small holes (the 1-D layers, sent uncompressed) goes in
    place over its span: keeping everything it equals DDP; keeping 30% with error feedback,
    the holes still equal DDP's average and every rank holds the same bits. "Equal" is up to
    the order of the additions (the span by the cost model's algorithm, the holes copied)."""
    for ratio in (1.0, 0.3):
        policy = Rules([("kind=1d", "none"), ("*", f"topk:ratio={ratio}")])
        plain, hooked = make(25.0), make(25.0)
        state = cddp.CompressionState(policy=policy).bind(hooked)
        hooked.register_comm_hook(state, cddp.compression_hook)
        for step in range(4):
            backward(plain, step)
            backward(hooked, step)
            a, b, bound = grads(plain), grads(hooked), order_bound(step)
            for name in a:
                if ratio == 1.0 or b[name].dim() == 1:
                    err = float((a[name] - b[name]).abs().max())
                    chk.check(within(a[name], b[name], bound[name]),
                              f"span ratio {ratio} step {step}: {name} differs by {err:.3g}")
                chk.check(bool(torch.isfinite(b[name]).all()), f"span {name} finite")
                chk.identical(b[name].numpy(), f"span ratio {ratio} step {step}: {name}")
        spans = [g for _, groups in state._groups.values() for g in groups if g.holes]
        chk.check(len(spans) == 1 and spans[0].name.endswith("~span"),
                  f"one span group ({[g.name for g in spans]})")
        if ratio < 1.0:  # its residual covers the span; the holes' stay zero
            fb = state.feedback(spans[0].spec)
            res = fb.residuals[spans[0].name]
            lo = spans[0].span[0]
            chk.check(res.size == spans[0].numel and np.abs(res).sum() > 0,
                      "span residual kept")
            chk.check(all(not res[a - lo:b - lo].any() for a, b in spans[0].holes),
                      "nothing kept in the holes")


#: Two fits as far apart as two machines': latency-bound (the allgather scheme would win)
#: and bandwidth-bound (reduce-scatter/allgather would).
FITS = (CostParams(alpha=1e-3, beta=1e-11, gamma=1e-12),
        CostParams(alpha=1e-9, beta=1e-6, gamma=1e-12))
PINNED = {"algorithm": "ring", "scheme": "reduce_scatter_allgather"}


def ordered(chk: Checker) -> None:
    """Where messages match only in posting order (NCCL; here gloo staged through CPU tensors
    with tags set aside), the worker starts the collectives: same gradients, bit for bit.
    Both sides pin the algorithm and the scheme, so their own cost-model fits do not count."""
    tagged = TorchCommunicator(dist.new_group(list(range(WORLD.size))))  # fits of their own
    comm = TorchCommunicator(dist.new_group(list(range(WORLD.size))), stage_device="cpu")
    comm.matches_by_tag = False
    runs = []
    for c, fit in zip((tagged, comm), FITS, strict=True):
        model = make(0.004)
        state = cddp.CompressionState(c, policy="uniform:bits=8", **PINNED).bind(model)
        state.communicator().cache.cost_params = fit
        model.register_comm_hook(state, cddp.compression_hook)
        got = []
        for step in range(3):
            backward(model, step)
            got.append(grads(model))
        runs.append(got)
    for step, (a, b) in enumerate(zip(*runs, strict=True)):
        for name in a:
            chk.check(torch.equal(a[name], b[name]), f"ordered step {step}: {name}")


def rules(chk: Checker) -> None:
    model = make(0.004)
    policy = Rules([("numel<200", "none"), ("kind=embedding", "topk:ratio=0.1"),
                    ("kind=conv", "powersgd:rank=2"), ("*", "uniform:bits=8")])
    state = cddp.CompressionState(policy=policy).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    for step in range(2):
        backward(model, step)
    want = {"emb.weight": "topk", "conv.weight": "powersgd", "conv.bias": "none",
            "norm.weight": "none", "norm.bias": "none", "fc1.weight": "uniform",
            "fc1.bias": "none", "fc2.weight": "uniform", "fc2.bias": "none"}
    got = {m: spec.split(":")[0] for rec in state.timeline if rec["step"] == 1
           for _, spec, members in rec["groups"] for m in members}
    chk.check(got == want, f"rules: {got}")
    alone = [members for rec in state.timeline for name, spec, members in rec["groups"]
             if spec.startswith("powersgd")]
    chk.check(all(m == ["conv.weight"] for m in alone), f"powersgd goes alone: {alone}")


def nonfinite(chk: Checker) -> None:
    model = make()
    state = cddp.CompressionState(policy="uniform:bits=8").bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    backward(model, 0)
    xb, yb = batch(1)
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    (loss * float("inf") if WORLD.rank == 0 else loss).backward()
    g = model.module.fc2.weight.grad
    chk.check(not bool(torch.isfinite(g).all()),
              "an Inf gradient on one rank reaches every rank's optimizer")
    backward(model, 2)  # the next step is finite again: residuals were not poisoned
    chk.check(all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()),
              "finite step after a non-finite one")


def auto(chk: Checker) -> None:
    model = make()
    policy = AutoPolicy(first=1, every=3, probe_steps=1, max_error=0.3, cost=SLOW,
                        trial_steps=0)  # decisions from the measurements, not step times
    state = cddp.CompressionState(policy=policy).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    for step in range(5):
        backward(model, step)
    chk.check(bool(policy.decisions), "auto policy decided")
    table = policy.table()
    same = WORLD.allgather(table)
    chk.check(len(set(same)) == 1, "every rank reached the same decision")
    chk.check(policy.total_error <= 0.3 + 1e-9, f"budget: {policy.total_error}")
    measured = policy.measured
    chk.check(measured is not None and measured["ranks"] == WORLD.size
              and all(0 < s < 10 for s in measured["seconds"].values()),
              f"one collective per candidate measured: {measured}")
    chk.check(len(set(map(repr, WORLD.allgather(measured)))) == 1,
              "every rank measured the same latencies")
    if WORLD.rank == 0:
        print(table)


class RankClock:
    """A timing source that differs by rank: each reading advances by a random step drawn
    from this rank's own generator, up to 50x apart between ranks."""

    def __init__(self) -> None:
        self.rng, self.now = np.random.default_rng(1000 + WORLD.rank), 0.0

    def perf_counter(self) -> float:
        self.now += float(self.rng.uniform(1e-6, 5e-5) * (1 + WORLD.rank))
        return self.now


def auto_noisy(chk: Checker) -> None:
    """Every rank times the codecs differently (its own noise); the ranks still decide alike,
    so every rank fuses the same groups (a split decision would deadlock the hook)."""
    from collectives.policy import profile

    saved, profile.time = profile.time, RankClock()  # type: ignore[assignment]
    try:
        model = make()
        policy = AutoPolicy(first=1, every=2, probe_steps=1, max_error=0.3, cost=SLOW,
                            min_numel=0, cache=False, trial_steps=0)  # profiled, every layer
        state = cddp.CompressionState(policy=policy).bind(model)
        model.register_comm_hook(state, cddp.compression_hook)
        for step in range(6):  # decides at steps 2 and 4
            backward(model, step)
    finally:
        profile.time = saved  # type: ignore[assignment]
    decided = sum(e["event"].startswith(("decided", "kept")) for e in policy.log)
    chk.check(decided == 2, f"auto, ranks timing apart: decided {decided} times")
    same = WORLD.allgather(sorted(policy.decisions.items()))
    chk.check(all(d == same[0] for d in same), f"ranks decided alike: {same}")
    chk.check(len(set(WORLD.allgather(policy.table()))) == 1, "the same table on every rank")


if __name__ == "__main__":
    main()

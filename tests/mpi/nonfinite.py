"""NaN/Inf on one rank through every compressor, scheme and error feedback, and a GradScaler
training run through the DDP hook: the bad step shows them on every rank, later steps are
finite again. Run: mpiexec -n P python tests/mpi/nonfinite.py
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from ddp_common import batch, init_gloo, make

import collectives
import collectives.ddp as cddp
import compressors
from collectives.compressed import feasible
from collectives.policy import Rules
from collectives.sparse import ALGORITHMS

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
BAD_RANK, BAD_STEP, STEPS = P - 1, 1, 4
SPECS = ["none", "fp16", "bf16", "uniform:bits=8", "qsgd", "terngrad", "sign",
         "topk:ratio=0.05", "topk:ratio=0.05,approximate=true", "randomk:ratio=0.05",
         "threshold:tau=1", "powersgd:rank=2"]
FEEDBACK = {"no feedback": None, "ef": compressors.ErrorFeedback,
            "no-ef": compressors.NoErrorFeedback}


def grad(step: int, bad: float) -> np.ndarray:
    x = np.random.default_rng([step, R]).standard_normal((24, 16)).astype(np.float32)
    if step == BAD_STEP and R == BAD_RANK:
        x[5, 7] = bad  # one element on one rank: a sparsifier keeps it only by chance
    return x


def one(chk: Checker, spec: str, scheme: str, fb_name: str, bad: float, **kw) -> None:
    comp = compressors.get(spec)
    make_fb = FEEDBACK[fb_name]
    fb = make_fb(comp) if make_fb else None
    for step in range(STEPS):
        what = f"{spec} {scheme} {fb_name} {kw} bad={bad} step {step}"
        y = collectives.allreduce(grad(step, bad), compressor=comp, feedback=fb, name="w",
                                  step=step, scheme=scheme, **kw)
        finite = bool(np.isfinite(y).all())
        chk.check(finite == (step != BAD_STEP), f"{what}: finite={finite}")
        chk.identical(np.asarray(y), what)


def every_compressor(chk: Checker) -> None:
    for spec in SPECS:
        for scheme in feasible(compressors.get(spec)):
            for fb_name in FEEDBACK:
                for bad in (np.nan, np.inf):
                    chk.run(f"{spec} {scheme} {fb_name}", one, chk, spec, scheme, fb_name, bad)
    for spec in ("topk:ratio=0.05", "randomk:ratio=0.05", "threshold:tau=1"):
        for alg in ALGORITHMS:  # each sparse allreduce, also as a global top-k of the sum
            for written in (alg, f"{alg}:k=10") if alg == "gtopk" else (alg,):
                chk.run(f"{spec} sparse {written}", one, chk, spec, "sparse", "ef", np.inf,
                        sparse_algorithm=written)


def scaler_run(chk: Checker) -> None:
    """torch.amp.GradScaler over the hook: one rank's overflow makes every rank skip the step
    (weights unchanged, scale lowered); training goes on with finite gradients."""
    model = make()
    policy = Rules([("kind=embedding", "randomk:ratio=0.1"), ("kind=conv", "powersgd:rank=2"),
                    ("kind=linear", "topk:ratio=0.1"), ("*", "uniform:bits=8")])
    state = cddp.CompressionState(policy=policy).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    bad = {"on": False}

    def poison(g: torch.Tensor) -> torch.Tensor:  # one element of every gradient
        if not bad["on"]:
            return g
        g = g.clone()
        g.view(-1)[0] = float("inf")
        return g

    for p in model.module.parameters():
        p.register_hook(poison)
    for step in range(5):
        bad["on"] = step == BAD_STEP and R == BAD_RANK
        before = [p.detach().clone() for p in model.parameters()]
        scale = scaler.get_scale()
        x, y = batch(step)
        model.zero_grad(set_to_none=False)
        scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        chk.check(finite == (step != BAD_STEP), f"scaler step {step}: finite grads {finite}")
        scaler.step(opt)
        scaler.update()
        lowered = scaler.get_scale() < scale
        chk.check(lowered == (step == BAD_STEP), f"scaler step {step}: scale lowered {lowered}")
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters(),
                                                          strict=True))
        chk.check(moved == (step != BAD_STEP), f"scaler step {step}: weights moved {moved}")
        for p in model.parameters():
            chk.identical(p.detach().numpy(), f"weights after step {step}")
            chk.check(bool(torch.isfinite(p).all()), f"finite weights after step {step}")


def main() -> None:
    chk = Checker("nonfinite")
    every_compressor(chk)
    init_gloo()
    chk.run("grad scaler through the DDP hook", scaler_run, chk)
    dist.barrier()
    dist.destroy_process_group()
    chk.finish()


if __name__ == "__main__":
    main()

"""``compcoll bench fsdp``: FSDP2 training with PyTorch's own reduce-scatter and ours.

Every run trains the same model from the same weights on the same batches under
``fully_shard`` (each block of the model, then the root; see :func:`shard`) and differs only
in how the gradients are reduce-scattered:

* ``plain``: FSDP2's own ``reduce_scatter_tensor`` in float32 on the gloo group;
* ``bf16``: FSDP2's ``MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)``, PyTorch's
  lower-precision reduce-scatter (parameters and compute stay float32);
* ``exact``: ours without compression (``none``), two-level on hosts of several ranks;
* ``int8-flat``: ours, 8 bits with error feedback, every rank a peer (``hierarchy="flat"``);
* ``int8``: ours, 8 bits with error feedback, two-level: float32 inside the host, 8 bits on
  what crosses hosts.

Parameters are all-gathered in float32 by FSDP itself in every run, so compression halves at
most the reduce-scatter's part of the traffic. Reported per run: the median step (slowest
rank, after warm-up) and its ratio to ``plain`` and to the faster of PyTorch's two runs, the
calls our reduce-scatters made (compressed, two-level), the training loss (mean over ranks of
the last 10 steps) and the test metric.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ..registry import command
from . import checks
from . import emulate as emulated
from . import train_common as common
from . import train_report as report
from .launch import add_np_argument
from .train_models import MODELS, task

#: The runs, in the order they are made unless ``--runs`` names others.
RUNS = ["plain", "bf16", "exact", "int8-flat", "int8"]
#: PyTorch's own runs (the baseline a ratio is taken to).
TORCH_RUNS = ("plain", "bf16")
#: Our runs: (compressor, hierarchy).
OURS = {"exact": ("none", "two_level"), "int8-flat": ("uniform:bits=8", "flat"),
        "int8": ("uniform:bits=8", "two_level")}
WARM = 5  # steps left out of the median (allocation, the first calls' set-up)

COLUMNS = [("model", "model", 8, "{}"), ("run", "run", 9, "{}"),
           ("step_ms", "step(ms)", 9, "{:.1f}"), ("vs_plain", "vs plain", 8, "{:.2f}x"),
           ("vs_torch", "vs torch", 8, "{:.2f}x"), ("compressed", "compressed", 10, "{}"),
           ("two_level", "two-level", 9, "{}"), ("final_loss", "loss", 7, "{:.3f}"),
           ("metric", "metric", 8, "{:.3f}"), ("metric_name", "", 13, "{}")]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="mlp-wide",
                   help=f"comma-separated of {', '.join(MODELS)} (mlp-wide)")
    p.add_argument("--runs", default=",".join(RUNS),
                   help=f"comma-separated of {', '.join(RUNS)} (all)")
    p.add_argument("--steps", type=int, default=30, help="training steps per run (30)")
    p.add_argument("--batch", type=checks.positive_int, default=16,
                   help="samples per rank per step (16)")
    p.add_argument("--lr", type=checks.positive_float, default=2e-3,
                   help="Adam learning rate (2e-3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and batches (0)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds any one step may take; past it every thread's stack is "
                   "printed and the rank exits (600)")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write every run (losses, step times, the command) as JSON")
    p.add_argument("--plot", metavar="PATH", type=checks.output_file,
                   help="PNG of the loss curves")
    p.add_argument("--txt", metavar="PATH", type=checks.output_file,
                   help="also write the table to PATH")
    add_np_argument(p)
    emulated.add_link_arguments(p)
    # what the training commands' shared checks and start-up read (our calls run on the
    # gloo group)
    p.set_defaults(comm="gloo", plan_link=None, scheme="auto")


def shard(model: Any, reduce_dtype: Any = None) -> Any:
    """``fully_shard`` every block (each parameter-holding member of an ``nn.Sequential`` or
    ``nn.ModuleList``, innermost first; a model without those: each parameter-holding child
    of the root), then the root: one reduce-scatter per block, as FSDP2 is used on
    transformer layers. ``reduce_dtype``: FSDP's gradient reduction type."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=reduce_dtype)
    blocks: list[Any] = []
    for m in reversed(list(model.modules())):
        if isinstance(m, torch.nn.Sequential | torch.nn.ModuleList):
            blocks += [c for c in m if all(c is not b for b in blocks)]
    for block in blocks or list(model.children()):
        if any(True for _ in block.parameters()):
            fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def _one(name: str, t: Any, args: argparse.Namespace, mpi: Any) -> dict[str, Any]:
    import torch

    from collectives.fsdp import compress_reduce_scatter

    model = shard(t.make(), torch.bfloat16 if name == "bf16" else None)
    comms = []
    if name in OURS:
        spec, hierarchy = OURS[name]
        comms = compress_reduce_scatter(model, spec, hierarchy=hierarchy,
                                        timeout=args.timeout / 2)
    opt = common.adam(model.parameters(), args.lr)
    losses, times = [], []
    for step in range(args.steps):
        common.watchdog(args)
        mpi.Barrier()
        t0 = time.perf_counter()
        loss = t.loss(model, t.batch(step, mpi.rank, args.batch, args.seed))
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    per_step = np.empty(len(times))
    mpi.Allreduce(np.asarray(times), per_step, op=common.mpi_max())  # the slowest rank's
    mean_loss = np.asarray(mpi.allreduce(np.asarray(losses))) / mpi.size
    calls = {k: sum(c.calls[k] for c in comms) for k in ("compressed", "plain", "two_level")}
    return {"model": t.name, "run": name, "steps": args.steps,
            "step_ms": float(np.median(per_step[WARM:])) * 1e3,
            "mean_ms": float(per_step[WARM:].mean()) * 1e3,
            "compressed": calls["compressed"] if comms else None,
            "two_level": calls["two_level"] if comms else None,
            "plain_calls": calls["plain"] if comms else None,
            "final_loss": float(mean_loss[-10:].mean()), "metric": t.evaluate(model),
            "metric_name": t.metric, "losses": mean_loss.tolist(),
            "step_times_ms": (per_step * 1e3).tolist()}


def ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's step against ``plain``'s and against the faster of PyTorch's runs of its
    model (where those ran)."""
    for r in rows:
        mine = [x for x in rows if x["model"] == r["model"]]
        plain = [x["step_ms"] for x in mine if x["run"] == "plain"]
        torch_best = [x["step_ms"] for x in mine if x["run"] in TORCH_RUNS]
        r["vs_plain"] = plain[0] / r["step_ms"] if plain else None
        r["vs_torch"] = min(torch_best) / r["step_ms"] if torch_best else None


@command("bench fsdp", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    models, runs = common.check(args, MODELS, RUNS)  # (10 steps at least: WARM + 5)
    code = common.launch(args)
    if code is not None:
        return code
    mpi = common.start(args)
    meta, cluster = common.meta(args, mpi), emulated.describe(args, mpi.size)
    where = f", {cluster['hosts']} hosts x {cluster['ranks_per_host']} ranks, {args.link} " \
        "links" if cluster else ""
    lines = [f"# compcoll bench fsdp: {mpi.size} ranks{where}, torch.distributed gloo, FSDP2, "
             f"{args.steps} steps, batch {args.batch}/rank",
             f"# command: {' '.join(meta['command'])}"]
    rows = []
    for m in models:
        t = task(m, args.seed)
        rows += [_one(name, t, args, mpi) for name in runs]
    ratios(rows)
    lines += [f"# step: median after {WARM} warm-up steps, slowest rank; vs torch: the "
              "faster of plain and bf16 over this run's step", report.header(COLUMNS)]
    lines += [report.format_row(r, COLUMNS) for r in rows]
    if mpi.rank == 0:
        print("\n".join(lines), flush=True)
        report.write_outputs(args, meta, rows, lines, f"compcoll bench fsdp, {mpi.size} ranks"
                             + (f", link {args.link}" if args.link else ""))
    common.finish()
    return 0

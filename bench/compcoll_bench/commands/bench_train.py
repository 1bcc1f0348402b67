"""``compcoll bench train``: data-parallel training with PyTorch's hooks and ours.

Each run trains the same model from the same weights on the same batches: DDP without a
hook, PyTorch's ``fp16_compress_hook`` and ``powerSGD_hook``, and ``collectives.ddp`` with
int8 + error feedback, top-k + error feedback and the automatic policy. Reported per run:
median time per step (the mean, which includes the automatic policy's profiling steps, is in
the JSON), compute time per step (forward + backward under ``no_sync``, no communication),
the communication share 1 - compute/step, the share of our hook's communication hidden
behind backward, the payload each rank contributes per step (what its compressor puts on
the wire), final loss and test metric (digits accuracy; bits per byte on held-out text).
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any

import numpy as np

from ..registry import command
from . import emulate as emulated
from . import train_common as common
from . import train_report as report
from .train_models import MODELS, task
from .train_runs import ONE_BUCKET, RUNS, payload_bytes


def _arguments(p: argparse.ArgumentParser) -> None:
    common.add_arguments(p, models="cnn,lm", model_help=f"comma-separated of "
                         f"{', '.join(MODELS)} (lm-large has > 10M parameters: the "
                         "bandwidth-bound case)", runs=TRAIN_RUNS, steps=120, bucket_mb=0.1,
                         bucket_help="these small models get several buckets, as large ones "
                         "do at 25")


#: The runs ``bench train`` makes unless ``--runs`` names others.
TRAIN_RUNS = ["ddp", "fp16", "powersgd", "int8+ef", "topk+ef", "auto"]


def _one(name: str, t: Any, args: argparse.Namespace, mpi: Any) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import collectives.ddp as cddp

    bucket_mb = ONE_BUCKET.get(name, args.bucket_mb)
    model = DDP(t.make(), bucket_cap_mb=bucket_mb)
    state = RUNS[name](model, args)
    opt = common.adam(model.parameters(), args.lr)
    losses, times = [], []
    for step in range(args.steps):
        seconds, loss = common.timed_step(model, t, opt, step, args, mpi)
        times.append(seconds)
        losses.append(loss)
    # the same work without communication (no optimizer step: the weights stay as trained)
    compute = [common.timed_step(model, t, None, step, args, mpi, compute_only=True)[0]
               for step in range(10)]
    warm = min(len(times) - 1, max(5, args.start_step + 3))
    per_step = np.empty(len(times))
    mpi.Allreduce(np.asarray(times), per_step, op=common.mpi_max())  # the slowest rank's time
    compute_s = mpi.allreduce(float(np.median(compute)), op=common.mpi_max())
    step_s = float(np.median(per_step[warm:]))
    mean_loss = np.asarray(mpi.allreduce(np.asarray(losses))) / mpi.size
    flat = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()]).numpy()
    agree = len(set(mpi.allgather(zlib.crc32(flat.tobytes())))) == 1  # not hash(): salted
    row = {"model": t.name, "run": name, "steps": args.steps, "bucket_mb": bucket_mb,
           "step_ms": step_s * 1e3,
           "mean_ms": float(per_step[warm:].mean()) * 1e3, "compute_ms": compute_s * 1e3,
           "comm_share": max(0.0, 1 - compute_s / step_s), "overlap": None,
           "payload_kb": payload_bytes(name, model.module, state) / 1e3,
           "final_loss": float(mean_loss[-10:].mean()), "metric": t.evaluate(model.module),
           "metric_name": t.metric, "parameters": int(flat.size), "ranks_agree": agree,
           "losses": mean_loss.tolist(), "step_times_ms": (per_step * 1e3).tolist()}
    if state is not None:
        ov = cddp.overlap(state, steps=args.steps - warm)
        last = [r["bucket"] for r in state.timeline if r["step"] == args.steps - 1]
        row.update(overlap=ov["overlap"], hook_ms=ov["hook_s"] * 1e3, buckets=len(last),
                   exposed_ms=ov["exposed_s"] * 1e3, comm_thread_ms=ov["comm_s"] * 1e3,
                   **{f"{ph}_ms": ov[f"{ph}_s"] * 1e3
                      for ph in ("encode", "decode", "copy", "wire")})
        if getattr(state.policy, "adaptive", False):
            row["decisions"] = state.policy.table()
            row["decision_log"] = state.policy.log
        state.close()
    return row


@command("bench train", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    models, runs = common.check(args, MODELS, list(RUNS))
    code = common.launch(args)
    if code is not None:
        return code
    mpi = common.start(args)
    tasks = [task(m, args.seed) for m in models]
    lines = [f"# compcoll bench train: {mpi.size} ranks, torch.distributed gloo, {args.steps} "
             f"steps, batch {args.batch}/rank, our hooks over {args.comm}"
             f"{', link ' + args.link if args.link else ''}", report.header()]
    if mpi.rank == 0:
        print("\n".join(lines), flush=True)
    rows = []
    for t in tasks:
        for name in runs:
            common.watchdog(args)
            row = _one(name, t, args, mpi)
            rows.append(row)
            lines.append(report.format_row(row))
            if mpi.rank == 0:
                print(lines[-1], flush=True)
    for i, ratio in report.overhead_vs_fp16(rows).items():
        rows[i]["overhead_vs_fp16"] = ratio
    lines += report.phase_lines(rows, emulated.describe(args, mpi.size))
    for row in rows:
        if "decisions" in row:
            lines += [f"# auto policy decisions, {row['model']}:", row["decisions"]]
    if mpi.rank == 0:
        print("\n".join(lines[2 + len(rows):]))
        report.write_outputs(args, common.meta(args, mpi), rows, lines,
                             f"compcoll bench train, {mpi.size} ranks")
    common.finish()
    return 0 if all(r["ranks_agree"] for r in rows) else 1

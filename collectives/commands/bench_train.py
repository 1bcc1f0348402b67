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
import datetime
import faulthandler
import socket
import time
import zlib
from typing import Any

import numpy as np

from ..cli import UsageError, command
from . import checks
from . import emulate as emulated
from . import train_report as report
from .launch import LAUNCHER_VARS, relaunch, without_np
from .train_models import LM_SIZES, task
from .train_runs import ONE_BUCKET, RUNS, init_gloo, payload_bytes


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="cnn,lm", help="comma-separated: cnn, lm, lm-large "
                   "(lm-large has > 10M parameters: the bandwidth-bound case)")
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated of {list(RUNS)}")
    p.add_argument("--steps", type=int, default=120, help="training steps per run (120)")
    p.add_argument("--batch", type=checks.positive_int, default=16,
                   help="samples per rank per step (16)")
    p.add_argument("--lr", type=checks.positive_float, default=2e-3,
                   help="Adam learning rate (2e-3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-mb", type=checks.positive_float, default=0.1,
                   help="DDP bucket_cap_mb for every run (0.1: these small models get several "
                   "buckets, as large ones do at 25)")
    p.add_argument("--start-step", type=checks.count_int, default=2,
                   help="uncompressed steps first (2)")
    p.add_argument("--every", type=checks.positive_int, default=50,
                   help="auto: re-decide every N steps")
    p.add_argument("--max-error", type=checks.positive_float, default=0.25,
                   help="auto: error budget")
    p.add_argument("--plan-link", metavar="RATE", help="auto: price communication for a "
                   "RATE link (e.g. 1gbit) instead of the fitted one")
    p.add_argument("--scheme", default="auto", help="our hook's scheme for compressed groups "
                   "(auto, dense, reduce_scatter_allgather, allgather, sparse)")
    p.add_argument("--comm", choices=("gloo", "mpi"), default="gloo",
                   help="our hook's communicator: the DDP process group or MPI_COMM_WORLD")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds any one step (or set-up phase) may take; past it every "
                   "thread's stack is printed and the rank exits, and our hooks' collectives "
                   "raise CollectiveTimeout naming the one that stalled (600)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--plot", metavar="PATH", help="PNG of the loss curves")
    p.add_argument("--txt", metavar="PATH", help="also write the table to PATH")
    p.add_argument("-np", dest="np", type=checks.positive_int, metavar="N",
                   help="run on N ranks, re-launching under mpiexec if needed")
    emulated.add_link_arguments(p)


def _check(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(models, runs); every argument that cannot work is refused here, before any rank
    starts."""
    from .. import emulate

    models = checks.names(args.model, "--model", ["cnn", *LM_SIZES])
    runs = checks.names(args.runs, "--runs", RUNS)
    if args.steps < 10:
        raise UsageError(f"need --steps >= 10 (the first steps are warm-up), got {args.steps}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")
    if args.plan_link:
        try:
            emulate.parse_rate(args.plan_link)
        except ValueError as exc:
            raise UsageError(f"--plan-link: {exc}") from None
    checks.scheme(args.scheme)
    for option in ("--json", "--plot", "--txt"):
        checks.output_path(getattr(args, option[2:]), option)
    if (args.delay or args.burst or args.mtu != 1500) and not args.link:
        raise UsageError("--delay, --burst and --mtu shape an emulated link; add --link RATE")
    return models, runs


def _plan_cost(args: argparse.Namespace, comm: Any) -> Any:
    if not args.plan_link:
        return None
    from .. import costmodel, emulate

    fitted = costmodel.params(comm)
    return costmodel.CostParams(fitted.alpha, 8.0 / emulate.parse_rate(args.plan_link),
                                fitted.gamma)


def _one(name: str, t: Any, args: argparse.Namespace, mpi: Any) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import collectives.ddp as cddp

    bucket_mb = ONE_BUCKET.get(name, args.bucket_mb)
    model = DDP(t.make(), bucket_cap_mb=bucket_mb)
    state = RUNS[name](model, args)
    opt = _adam(model.parameters(), args.lr)
    losses, times = [], []
    for step in range(args.steps):
        watchdog(args)
        mpi.Barrier()
        t0 = time.perf_counter()
        loss = t.loss(model, t.batch(step, mpi.rank, args.batch, args.seed))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    compute = []
    for step in range(10):  # the same work without communication
        watchdog(args)
        mpi.Barrier()
        t0 = time.perf_counter()
        with model.no_sync():
            t.loss(model, t.batch(step, mpi.rank, args.batch, args.seed)).backward()
        compute.append(time.perf_counter() - t0)
    warm = min(len(times) - 1, max(5, args.start_step + 3))
    per_step = np.empty(len(times))
    mpi.Allreduce(np.asarray(times), per_step, op=_max())  # the slowest rank's time
    compute_s = mpi.allreduce(float(np.median(compute)), op=_max())
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
                   exposed_ms=ov["exposed_s"] * 1e3, comm_thread_ms=ov["comm_s"] * 1e3)
        if getattr(state.policy, "adaptive", False):
            row["decisions"] = state.policy.table()
            row["decision_log"] = state.policy.log
        state.close()
    return row


def _adam(params: Any, lr: float) -> Any:
    """Adam, the fused kernel where this torch has one for the parameters' device (one pass
    over the weights, vectorised; the per-tensor loop costs about as much as the backward
    pass of these models on shared cores), else the default implementation. Every run uses
    the same."""
    import torch

    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def watchdog(args: argparse.Namespace) -> None:
    """(Re)arm the stall watchdog: if this rank is still here ``args.timeout`` seconds from
    now, every thread's stack goes to stderr and the rank exits (mpiexec then ends the job),
    so a stalled collective is a diagnosed failure, never a hang."""
    faulthandler.dump_traceback_later(args.timeout, exit=True)


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


@command("bench train", help="train small models with PyTorch's DDP hooks and ours",
         arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    models, runs = _check(args)
    if args.plot:
        from .bench_report import require_matplotlib

        require_matplotlib()
    if args.link and not emulated.inside():
        if any(v in __import__("os").environ for v in LAUNCHER_VARS):
            raise UsageError("--link starts its own ranks; run it without mpiexec")
        return emulated.run_on_cluster(emulated.topology(args), args.argv)
    code = relaunch(args.np, args.argv)
    if code is not None:
        return code
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from .. import as_communicator

    torch.set_num_threads(1)  # ranks share the cores: one thread each, no spinning teams
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # OpenBLAS/OpenMP of numpy and the extension, on every thread
    except ImportError:
        pass
    watchdog(args)
    mpi = MPI.COMM_WORLD
    init_gloo(mpi, emulated.inside(), args.timeout)
    from .. import costmodel

    shared = as_communicator(dist.group.WORLD)  # our hooks' communicator, fitted once here
    costmodel.params(shared if args.comm == "gloo" else as_communicator(mpi))
    args.plan_cost = _plan_cost(args, shared if args.comm == "gloo" else as_communicator(mpi))
    tasks = [task(m, args.seed) for m in models]
    lines = [f"# compcoll bench train: {mpi.size} ranks, torch.distributed gloo, {args.steps} "
             f"steps, batch {args.batch}/rank, our hooks over {args.comm}"
             f"{', link ' + args.link if args.link else ''}", report.header()]
    if mpi.rank == 0:
        print("\n".join(lines), flush=True)
    rows = []
    for t in tasks:
        for name in runs:
            watchdog(args)
            row = _one(name, t, args, mpi)
            rows.append(row)
            lines.append(report.format_row(row))
            if mpi.rank == 0:
                print(lines[-1], flush=True)
    for row in rows:
        if "decisions" in row:
            lines += [f"# auto policy decisions, {row['model']}:", row["decisions"]]
    if mpi.rank == 0:
        print("\n".join(lines[2 + len(rows):]))
        _write(args, mpi, rows, lines)
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    return 0 if all(r["ranks_agree"] for r in rows) else 1


def _write(args: argparse.Namespace, mpi: Any, rows: list[dict], lines: list[str]) -> None:
    argv = without_np(args.argv)
    meta = {"command": ["compcoll", *argv[:2], "-np", str(mpi.size), *argv[2:]],
            "ranks": mpi.size, "hostname": socket.gethostname(), "link": args.link,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.json:
        report.write_json(args.json, meta, rows)
    if args.txt:
        with open(args.txt, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.plot:
        report.plot(args.plot, rows, f"compcoll bench train, {mpi.size} ranks")

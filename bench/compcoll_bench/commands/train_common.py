"""What ``compcoll bench train`` and ``compcoll bench tta`` share: their options and checks,
starting the ranks (``-np``, ``--link``), torch.distributed and the cost model on every rank,
the optimizer, the stall watchdog and the result files' metadata."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ..registry import UsageError
from . import checks
from . import emulate as emulated
from .launch import LAUNCHER_VARS, add_np_argument, relaunch, without_np
from .train_runs import RUNS, init_gloo


def add_arguments(p: argparse.ArgumentParser, *, models: str, model_help: str,
                  runs: list[str], steps: int, bucket_mb: float, bucket_help: str,
                  known: list[str] | None = None) -> None:
    """The options both training benchmarks take (their defaults differ; ``known``: the run
    names accepted, the registry's by default)."""
    p.add_argument("--model", default=models, help=model_help)
    p.add_argument("--runs", default=",".join(runs), help=f"comma-separated of "
                   f"{', '.join(known or RUNS)} (default: {','.join(runs)})")
    p.add_argument("--steps", type=int, default=steps, help=f"training steps per run ({steps})")
    p.add_argument("--batch", type=checks.positive_int, default=16,
                   help="samples per rank per step (16)")
    p.add_argument("--lr", type=checks.positive_float, default=2e-3,
                   help="Adam learning rate (2e-3)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the weights and batches, the same for every run (0)")
    p.add_argument("--bucket-mb", type=checks.positive_float, default=bucket_mb,
                   help=f"DDP bucket_cap_mb for every run ({bucket_mb:g}: {bucket_help})")
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
    p.add_argument("--plain", metavar="ALGO", help="our hook's allreduce of uncompressed "
                   "groups (default: the engine's own, as DDP; or ring, tree, "
                   "recursive_doubling, rabenseifner, auto)")
    p.add_argument("--comm", choices=("gloo", "mpi"), default="gloo",
                   help="our hook's communicator: the DDP process group or MPI_COMM_WORLD")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds any one step (or set-up phase) may take; past it every "
                   "thread's stack is printed and the rank exits, and our hooks' collectives "
                   "raise CollectiveTimeout naming the one that stalled (600)")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write every run (curves, step times, the command) as JSON")
    p.add_argument("--plot", metavar="PATH", type=checks.output_file,
                   help="PNG of the curves")
    p.add_argument("--txt", metavar="PATH", type=checks.output_file,
                   help="also write the table to PATH")
    add_np_argument(p)
    emulated.add_link_arguments(p)


def check(args: argparse.Namespace, models: list[str], runs: list[str]
          ) -> tuple[list[str], list[str]]:
    """(models, runs) asked for; every shared argument that cannot work is refused here,
    before any rank starts."""
    from .. import emulate

    chosen = checks.names(args.model, "--model", models)
    picked = checks.names(args.runs, "--runs", runs)
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
    emulated.check_arguments(args)
    return chosen, picked


def launch(args: argparse.Namespace) -> int | None:
    """Start the ranks when this process is not one of them yet (``--link``: on the emulated
    cluster; ``-np``: under mpiexec) and return their exit code; None in a rank."""
    if args.plot:
        from .bench_report import require_matplotlib

        require_matplotlib()
    if args.link and not emulated.inside():
        if any(v in os.environ for v in LAUNCHER_VARS):
            raise UsageError("--link starts its own ranks; run it without mpiexec")
        return emulated.run_on_cluster(emulated.topology(args), args.argv)
    return relaunch(args.np, args.argv)


def start(args: argparse.Namespace) -> Any:
    """In a rank: one thread per rank, torch.distributed over gloo, the cost model fitted once
    on our hooks' communicator (and ``args.plan_cost`` set); returns MPI_COMM_WORLD."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from collectives import as_communicator, costmodel

    torch.set_num_threads(1)  # ranks share the cores: one thread each, no spinning teams
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # OpenBLAS/OpenMP of numpy and the extension, on every thread
    except ImportError:
        pass
    watchdog(args)
    mpi = MPI.COMM_WORLD
    init_gloo(mpi, emulated.inside(), args.timeout)
    ours = as_communicator(dist.group.WORLD) if args.comm == "gloo" else as_communicator(mpi)
    costmodel.params(ours)
    args.plan_cost = None
    if args.plan_link:
        from .. import emulate

        fitted = costmodel.params(ours)
        args.plan_cost = costmodel.CostParams(fitted.alpha,
                                              8.0 / emulate.parse_rate(args.plan_link),
                                              fitted.gamma)
    return mpi


def finish() -> None:
    """Leave torch.distributed and disarm the watchdog."""
    import torch.distributed as dist

    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def adam(params: Any, lr: float) -> Any:
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


def mpi_max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def meta(args: argparse.Namespace, mpi: Any) -> dict[str, Any]:
    """The result files' metadata: the command line that reproduces them (with its -np),
    ranks, host, link and date."""
    argv = without_np(args.argv)
    return {"command": ["compcoll", *argv[:2], "-np", str(mpi.size), *argv[2:]],
            "ranks": mpi.size, "hostname": socket.gethostname(), "link": args.link,
            "cluster": emulated.describe(args, mpi.size),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@dataclass(frozen=True)
class StepTime:
    """One training step on one rank: its loss and seconds, whole and in parts."""

    seconds: float  # from the barrier's end to the optimizer's
    loss: float
    forward: float  # the loss computation (DDP's forward included)
    backward: float  # loss.backward(): DDP's hooks and its wait for their futures included
    optimizer: float  # opt.step() and zero_grad (0 without an optimizer)


def split_step(model: Any, t: Any, opt: Any, step: int, args: argparse.Namespace, mpi: Any,
               compute_only: bool = False) -> StepTime:
    """One training step on every rank, timed whole and in parts. The clock starts after a
    barrier and stops when the optimizer is done; ``compute_only`` skips DDP's gradient
    communication. DDP waits for every bucket's communication at the end of backward, so
    that wait is in ``backward``."""
    watchdog(args)
    mpi.Barrier()
    t0 = time.perf_counter()
    with model.no_sync() if compute_only else contextlib.nullcontext():
        loss = t.loss(model, t.batch(step, mpi.rank, args.batch, args.seed))
        t1 = time.perf_counter()
        loss.backward()
    t2 = time.perf_counter()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=False)
    t3 = time.perf_counter()
    return StepTime(t3 - t0, float(loss.detach()), t1 - t0, t2 - t1, t3 - t2)


def timed_step(model: Any, t: Any, opt: Any, step: int, args: argparse.Namespace, mpi: Any,
               compute_only: bool = False) -> tuple[float, float]:
    """One training step on every rank, (seconds, loss): :func:`split_step` without the
    parts."""
    st = split_step(model, t, opt, step, args, mpi, compute_only)
    return st.seconds, st.loss

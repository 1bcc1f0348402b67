"""``compcoll bench allreduce``: an nccl-tests-style sweep of every allreduce algorithm.

For each message size and algorithm: warm-up calls, then ``-n`` calls each timed on its own
after a barrier (the slowest rank's time per call), then, with ``-c 1``, one call on fresh
input whose result is compared with the closed-form answer on every rank and whose bits are
compared across ranks. The blocking ``MPI_Allreduce`` of the MPI library is always timed as
the baseline every row is compared with.

``--compressor`` adds a row per (size, algorithm, compressor): the compressed allreduce with
error feedback, through the scheme the library picks (the dense scheme runs the row's
algorithm); see ``bench_compressor`` for its inputs, split times and check.

Test-only hook: ``COMPCOLL_BENCH_CORRUPT=<algo>`` (or ``<algo>/<compressor spec>``) flips
element 0 of that row's checked result on rank 0, which must make the row show ``#wrong >= 1``
and the command exit non-zero.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
from typing import Any

from collectives import as_communicator, costmodel, defaults, ops, tuning
from collectives.algorithms import REGISTRY, modeled
from collectives.algorithms import get as get_algorithm
from compressors import dtypes

from ..registry import UsageError, command
from . import bench_report as report
from . import checks, noise
from . import emulate as emulated
from .bench_case import BASELINE
from .bench_compressor import NONE, check_specs, combos, split_specs
from .bench_sweep import places, sweep
from .benchlib import comment, parse_size, size_sweep
from .launch import LAUNCHER_VARS, add_np_argument, relaunch, without_np

DEFAULT_ALGOS = [*(a.name for a in REGISTRY.values() if a.ours), "auto", "mpi"]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"),
                   help="smallest message (bytes; K/M/G suffixes), default 1K")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"),
                   help="largest message, default 64M")
    p.add_argument("-f", "--stepfactor", type=int, default=2,
                   help="each size is the one before times this factor (>= 2), default 2")
    p.add_argument("-n", "--iters", type=checks.positive_int, default=20,
                   help="timed calls per row (20)")
    p.add_argument("-w", "--warmup", type=checks.count_int, default=5,
                   help="untimed calls first (5)")
    p.add_argument("-c", "--check", type=int, choices=(0, 1), default=1,
                   help="check results (1, default) or not (0). A compressed sum is not exact: "
                        "there #wrong counts elements whose bits differ from rank 0's result "
                        "plus non-finite ones, and rel.err shows the error against the exact sum")
    p.add_argument("--algo", default=",".join(DEFAULT_ALGOS),
                   help=f"comma-separated algorithms (default {','.join(DEFAULT_ALGOS)})")
    p.add_argument("--compressor", action="append", metavar="SPECS",
                   help="comma-separated compressor specs, also repeatable, e.g. none,"
                        "uniform:bits=8,topk:ratio=0.01,approximate=true (a key=value token "
                        "belongs to the spec before it); default none. mpi and torch run with "
                        "none only")
    p.add_argument("--scheme", default="auto",
                   help="compressed allreduce scheme (default auto: the library picks)")
    p.add_argument("--no-feedback", action="store_true",
                   help="compress without error feedback")
    p.add_argument("--dtype", default="float32", choices=dtypes.SUPPORTED,
                   help="element type (default float32)")
    p.add_argument("--op", default="sum", choices=ops.SUPPORTED_OPS,
                   help="reduction (default sum)")
    place = p.add_mutually_exclusive_group()
    place.add_argument("--inplace", dest="inplace", action="store_true", default=None,
                       help="time only in place (out=buf: the result overwrites the input); "
                            "default: out of place and in place, side by side")
    place.add_argument("--outofplace", dest="inplace", action="store_false",
                       help="time only out of place (the result goes to a separate buffer)")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write metadata and rows (every column, p90/p99, the time split of "
                        "compressed rows) as JSON")
    p.add_argument("--txt", metavar="PATH", type=checks.output_file,
                   help="write the printed table, headed by the command line, as text")
    p.add_argument("--csv", metavar="PATH", type=checks.output_file,
                   help="write the rows as CSV")
    p.add_argument("--plot", metavar="PATH", type=checks.output_file,
                   help="plot busbw against size (matplotlib), e.g. busbw.png")
    add_np_argument(p)
    emulated.add_link_arguments(p)


def _algorithms(text: str) -> list[str]:
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise UsageError(f"--algo {text!r} names no algorithm; choose from "
                         f"{', '.join(DEFAULT_ALGOS)}")
    for name in names:
        if name != "auto":
            try:
                get_algorithm(name)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    return names


def _check_engine(names: list[str], engine: str) -> None:
    for name in names:
        if name in REGISTRY and not REGISTRY[name].ours and name != engine:
            raise UsageError(f"--algo {name} needs a {name} communicator; bench allreduce "
                             f"runs on {engine}: use --algo {engine} for the engine's own")


def _check(args: argparse.Namespace, dtype: dtypes.DType) -> tuple[str, list[int], list[str]]:
    """(op, sizes, compressor specs) of the run; every argument that cannot work is refused
    here, before any rank starts."""
    try:
        op = ops.check_op(args.op, dtype)
        sizes = [s for s in size_sweep(args.minbytes, args.maxbytes, args.stepfactor)
                 if s >= dtype.itemsize]
        specs = split_specs(args.compressor)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not sizes:
        raise UsageError(f"no size in -b {args.minbytes} .. -e {args.maxbytes} holds one "
                         f"{dtype.name} ({dtype.itemsize} B); raise -e")
    checks.scheme(args.scheme)
    for spec in specs:
        checks.compressor(spec)
    check_specs(specs, dtype, op, args.scheme)
    _check_engine(_algorithms(args.algo), "mpi")  # the command runs on MPI_COMM_WORLD
    emulated.check_arguments(args)
    return op, sizes, specs


def _launched() -> bool:
    return any(v in os.environ for v in LAUNCHER_VARS)


def _progress(total: int, rank: int) -> Any:
    if rank != 0 or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, leave=False, unit="row")


@command("bench allreduce", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    dtype = dtypes.lookup(args.dtype)
    op, sizes, specs = _check(args, dtype)
    names = [BASELINE, *_algorithms(args.algo)]
    pairs, skipped = combos(names, specs)
    if args.plot:
        report.require_matplotlib()
    if args.link and not emulated.inside():
        topo = emulated.topology(args)
        if _launched():
            raise UsageError("--link starts its own ranks, in one namespace per host; run it "
                             "without mpiexec")
        return emulated.run_on_cluster(topo, args.argv)
    code = relaunch(args.np, args.argv)
    if code is not None:
        return code
    from mpi4py import MPI

    comm = as_communicator(None)
    _check_engine(names, comm.engine)
    cost = costmodel.params(comm)
    crossovers = tuning.lookup(comm)
    rank0 = comm.rank == 0
    bar = _progress(len(sizes) * len(pairs), comm.rank)
    printed: list[str] = []  # the table as printed, for --txt

    def out(line: str) -> None:
        printed.append(line)
        (bar.write if bar is not None else print)(line)
    real = [s for s in specs if s != NONE]
    candidates = tuple(a.name for a in modeled())  # what auto chooses among
    lay = report.layout(places(args.inplace), algo=report.algo_width(names, candidates),
                        max_size=sizes[-1], itemsize=dtype.itemsize, compressors=real)
    if rank0:
        where = emulated.label(args, comm.size)
        out(f"# compcoll bench allreduce: {comm.size} ranks{', ' + where if where else ''}, "
            f"{dtype.name} {op}, {args.iters} iters, {args.warmup} warm-up, check {args.check}")
        for line in comment(f"cost model fitted on this communicator: alpha "
                            f"{cost.alpha * 1e6:.2f} us, beta {cost.beta * 1e9:.4f} ns/B "
                            f"({1 / cost.beta / 1e9 if cost.beta else 0:.2f} GB/s), gamma "
                            f"{cost.gamma * 1e9:.4f} ns/B; model: its prediction of time(us)"):
            out(line)
        for line in comment(report.LEGEND) + comment(noise.legend(args.iters, BASELINE,
                                                                    "vs MPI")):
            out(line)
        out(f"# auto: the measured crossover table (compcoll tune) from "
            f"{crossovers.sizes[0]} B, the cost model below" if crossovers is not None else
            "# auto: the cost model (no crossover table for this machine; compcoll tune "
            "measures one)")
        if real:
            for line in comment(f"compressed rows: Gaussian inputs, "
                                f"{'no ' if args.no_feedback else ''}error feedback, scheme "
                                f"{args.scheme}; effbusbw counts the uncompressed bytes; "
                                f"#wrong = elements differing from rank 0's or not finite; "
                                f"--json adds each row's compress, communicate and decompress "
                                f"times and bytes sent"):
                out(line)
        if skipped:
            for line in comment(f"skipped (baselines run uncompressed only): "
                                f"{', '.join(skipped)}"):
                out(line)
        for line in report.header(lay):
            out(line)
    saved, defaults.validate = defaults.validate, False  # no per-call metadata allgather
    try:
        rows = sweep(comm, args, dtype, op, sizes, pairs, cost, bar,
                      lambda same: out(report.format_line(same, lay)) if rank0 else None)
    finally:
        defaults.validate = saved
        if bar is not None:
            bar.close()
    bad = [r for r in rows if r["wrong"] or not r["ranks_agree"]]
    if rank0:
        auto_regret = report.regret(rows, candidates)
        notes = comment(report.ERROR_NOTE) if real else []
        if real and not args.link:
            notes += comment(emulated.SHARED_MEMORY_HINT)
        regret = [wrapped for line in report.regret_lines(auto_regret)
                  for wrapped in comment(line.removeprefix("# "))]
        shown = [r for r in rows if r["inplace"] == lay.places[0]]  # the ratios printed
        for line in [*report.footer(rows), noise.summary(shown, "vs MPI"), *regret, *notes]:
            out(line)
        for r in bad:
            what = r["algo"] if r["compressor"] == NONE else f"{r['algo']} with {r['compressor']}"
            where = "in place" if r["inplace"] else "out of place"
            print(f"# FAILED {what} at {r['size']} B {where}: {r['wrong']} wrong element(s)"
                  f"{'' if r['ranks_agree'] else ', ranks hold different results'}",
                  file=sys.stderr)
        argv = without_np(args.argv)  # recorded with the -np that reproduces this run
        meta = {"command": ["compcoll", *argv[:2], "-np", str(comm.size), *argv[2:]],
                "ranks": comm.size,
                "mpi_library": " ".join(MPI.Get_library_version().splitlines()[0].split()),
                "hostname": socket.gethostname(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "iters": args.iters, "warmup": args.warmup,
                "spread": noise.SPREAD_MEANS, "noisy": noise.NOISY_MEANS,
                "cost_params": {"alpha": cost.alpha, "beta": cost.beta, "gamma": cost.gamma},
                "link": emulated.describe(args, comm.size),
                "crossovers": None if crossovers is None else
                {"sizes": list(crossovers.sizes), "best": list(crossovers.best())},
                "modeled": list(candidates), "auto_regret": auto_regret}
        if args.txt:
            with open(args.txt, "w") as f:
                f.write("\n".join([printed[0], f"# command: {' '.join(meta['command'])}",
                                   *printed[1:]]) + "\n")
        if args.json:
            report.write_json(args.json, meta, rows)
        if args.csv:
            report.write_csv(args.csv, rows)
        if args.plot:
            link = meta["link"]
            where = emulated.label(args, comm.size) or f"{comm.size} ranks"
            where += ", in place" if lay.places[0] else ", out of place"
            report.plot(args.plot, shown, f"allreduce {dtype.name} {op}, {where} "
                                         f"({meta['mpi_library']})\nmedian of {args.iters} "
                                         f"calls per point, bars p25 to p75",
                        limit_GBps=link["rate_bps"] / 8e9 if link else None)
    return 1 if bad else 0

"""``compcoll tune``: measure "auto"'s crossover table on this machine and save it.

Runs ``collectives.tuning.tune`` on ``-np`` ranks: every modeled algorithm timed at each
size (float32 sum), the fastest kept. Prints each algorithm's time, the measured winner and
the cost model's pick at each size; saves the table where every later "auto" on the same
world size, hosts and library finds it (see ``collectives.tuning``).
"""

from __future__ import annotations

import argparse
import datetime
import json

from collectives import as_communicator, costmodel
from collectives import tuning as tuning_mod

from ..cli import command
from . import checks
from .benchlib import parse_size, size_sweep
from .launch import add_np_argument, relaunch, without_np


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1M"),
                   help="smallest size timed (bytes; K/M/G suffixes), default 1M; below it "
                        "the cost model decides")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"),
                   help="largest size timed, default 64M")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size factor, default 2")
    p.add_argument("-n", "--reps", type=checks.positive_int, default=9,
                   help="timed calls per algorithm and size (9), interleaved")
    p.add_argument("--no-save", action="store_true",
                   help="print the table, do not save it for later runs")
    p.add_argument("--json", metavar="PATH", help="write the table and the command as JSON")
    p.add_argument("--txt", metavar="PATH", help="write the printed table as text")
    add_np_argument(p)


@command("tune", arguments=_arguments,
         help="time every allreduce algorithm here and save auto's crossover table")
def run(args: argparse.Namespace) -> int:
    code = relaunch(args.np, args.argv)
    if code is not None:
        return code
    comm = as_communicator(None)
    sizes = tuple(size_sweep(args.minbytes, args.maxbytes, args.stepfactor))
    table = tuning_mod.tune(comm, sizes=sizes, reps=args.reps, save=not args.no_save)
    cost = costmodel.params(comm)
    key = tuning_mod.key(comm)
    if comm.rank != 0:
        return 0
    names = list(table.times)
    command_line = ["compcoll", *without_np(args.argv)[:1], "-np", str(comm.size),
                    *without_np(args.argv)[1:]]
    lines = [f"# compcoll tune: {comm.size} ranks, float32 sum, {args.reps} interleaved calls "
             f"per algorithm and size; time(us): the median over the calls of the slowest "
             f"rank's time",
             f"# command: {' '.join(command_line)}",
             f"{'size(B)':>11} " + " ".join(f"{a:>18}" for a in names)
             + f" {'measured best':>18} {'model picks':>18} {'auto runs':>18}"]
    for i, (size, best) in enumerate(zip(table.sizes, table.best(), strict=True)):
        model = costmodel.predicted_best(comm.size, size, cost)
        lines.append(f"{size:>11} " + " ".join(f"{table.times[a][i] * 1e6:>18.1f}"
                                               for a in names)
                     + f" {best:>18} {model:>18} {table.pick(size, model):>18}")
    where = "not saved (--no-save)" if args.no_save else f"saved to {tuning_mod.path(key)}"
    lines.append(f"# auto runs the model's pick unless the table times it more than "
                 f"{tuning_mod.MARGIN:.0%} slower than the measured best (from "
                 f"{table.sizes[0]} B up; the model alone below); table {where}")
    print("\n".join(lines))
    if args.txt:
        with open(args.txt, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command_line, "ranks": comm.size,
                       "date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "sizes": list(table.sizes), "times_s": table.times,
                       "best": list(table.best()), "margin": tuning_mod.MARGIN,
                       "auto": [table.pick(size, costmodel.predicted_best(comm.size, size,
                                                                          cost))
                                for size in table.sizes],
                       "key": key}, f, indent=1)
            f.write("\n")
    return 0

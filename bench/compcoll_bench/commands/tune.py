"""``compcoll tune``: measure "auto"'s crossover table on this machine and save it.

Runs ``collectives.tuner.tune`` on ``-np`` ranks: every modeled algorithm timed at each
size (float32 sum), the fastest kept. Prints each algorithm's time, the measured winner and
the cost model's pick at each size; saves the table where every later "auto" on the same
world size, hosts and library finds it (see ``collectives.tuning``).
"""

from __future__ import annotations

import argparse
import datetime
import json

from collectives import as_communicator, costmodel, tuner
from collectives import tuning as tuning_mod

from ..registry import UsageError, command
from . import checks
from .benchlib import comment, parse_size, size_sweep
from .launch import add_np_argument, relaunch, without_np


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1M"),
                   help="smallest size timed (bytes; K/M/G suffixes), default 1M; below it "
                        "the cost model decides")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("64M"),
                   help="largest size timed, default 64M")
    p.add_argument("-f", "--stepfactor", type=int, default=2,
                   help="each size is the one before times this factor (>= 2), default 2")
    p.add_argument("-n", "--reps", type=checks.positive_int, default=9,
                   help="timed calls per algorithm and size (9), interleaved")
    p.add_argument("--no-save", action="store_true",
                   help="print the table, do not save it for later runs")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write the table and the command as JSON")
    p.add_argument("--txt", metavar="PATH", type=checks.output_file,
                   help="write the printed table as text")
    add_np_argument(p)


def _sizes(args: argparse.Namespace) -> tuple[int, ...]:
    """The sizes to time; refused here, before any rank starts, when -b, -e, -f make none or
    when the table could not be saved where later runs look for it."""
    try:
        sizes = tuple(size_sweep(args.minbytes, args.maxbytes, args.stepfactor))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = None if args.no_save else checks.unwritable_folder(tuning_mod.path("-").parent)
    if problem:
        raise UsageError(f"the table could not be saved: {problem}; set "
                         f"{tuning_mod.ENV_CACHE} to a folder you can write, or add --no-save")
    return sizes


@command("tune", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    sizes = _sizes(args)  # --json and --txt: checked by the parser
    code = relaunch(args.np, args.argv)
    if code is not None:
        return code
    comm = as_communicator(None)
    table = tuner.tune(comm, sizes=sizes, reps=args.reps, save=not args.no_save)
    cost = costmodel.params(comm)
    key = tuning_mod.key(comm)
    if comm.rank != 0:
        return 0
    names = list(table.times)
    command_line = ["compcoll", *without_np(args.argv)[:1], "-np", str(comm.size),
                    *without_np(args.argv)[1:]]
    lines = [*comment(f"compcoll tune: {comm.size} ranks, float32 sum, {args.reps} "
                      f"interleaved calls per algorithm and size; each algorithm's column: "
                      f"time(us), the median over the calls of the slowest rank's time"),
             f"# command: {' '.join(command_line)}"]
    width = {a: max(len(a), 9) for a in names}  # time columns, as wide as their names
    pick = max(len("measured best"), *map(len, names))
    sw = max(len("size(B)"), len(str(sizes[-1])))
    lines.append(f"{'size(B)':>{sw}} "
                 + " ".join(f"{a:>{width[a]}}" for a in names)
                 + f" {'measured best':>{pick}} {'model picks':>{pick}} {'auto runs':>{pick}}")
    for i, (size, best) in enumerate(zip(table.sizes, table.best(), strict=True)):
        model = costmodel.predicted_best(comm.size, size, cost)
        lines.append(f"{size:>{sw}} "
                     + " ".join(f"{table.times[a][i] * 1e6:>{width[a]}.1f}" for a in names)
                     + f" {best:>{pick}} {model:>{pick}} {table.pick(size, model):>{pick}}")
    where = "not saved (--no-save)" if args.no_save else f"saved to {tuning_mod.path(key)}"
    lines += comment(f"auto runs the model's pick unless the table times it more than "
                     f"{tuning_mod.MARGIN:.0%} slower than the measured best (from "
                     f"{table.sizes[0]} B up; the model alone below)")
    lines.append(f"# table {where}")
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

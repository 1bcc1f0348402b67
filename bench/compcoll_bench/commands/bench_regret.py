"""``compcoll bench regret``: how much ``auto``'s pick of allreduce algorithm costs, over
repeated ``bench allreduce`` runs.

One run's regret (``bench allreduce``'s footer) mixes the decision with the run's noise: on
shared cores the same algorithm's time differs by 10-50% between two rows of one run. This
command reads the JSON of several runs, takes each algorithm's median time per (ranks, size,
placement) over the runs, and judges each run's pick against those medians:

    regret = median over runs of  t_med(the run's pick) / min over algorithms of t_med

so a cell's regret is the decision's cost, not one row's luck. The goal for shared memory is
a regret of at most 1.10 from 1 MB up.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections import Counter
from typing import Any

from collectives.algorithms import modeled

from ..registry import UsageError, command
from . import checks
from .bench_report import REGRET_FROM

#: The regret ``auto`` should stay within from ``REGRET_FROM`` bytes up (shared memory).
GOAL = 1.10


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="JSON",
                   help="bench allreduce --json files (several runs; any rank counts)")
    p.add_argument("--reference", nargs="+", default=[], metavar="JSON",
                   help="more runs whose times join the medians but whose picks are not "
                        "judged (to judge two rules against the same medians)")
    p.add_argument("--from-bytes", type=int, default=REGRET_FROM,
                   help=f"smallest size judged (default {REGRET_FROM})")
    p.add_argument("--md", metavar="PATH", type=checks.output_file,
                   help="write the table as Markdown here")
    p.add_argument("--json", metavar="PATH", type=checks.output_file,
                   help="write the cells and the summary as JSON here")


def cells(runs: list[dict[str, Any]], from_bytes: int = REGRET_FROM,
          reference: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per (ranks, size, placement): the median time of each algorithm over the runs (and
    the ``reference`` runs), the picks of ``runs``, the best algorithm and the regret (see
    the module doc)."""
    times: dict[tuple[int, int, bool], dict[str, list[float]]] = {}
    picks: dict[tuple[int, int, bool], list[str]] = {}
    judged = {id(run) for run in runs}
    for run in [*runs, *(reference or [])]:
        candidates = set(run.get("modeled") or (a.name for a in modeled()))
        for r in run["rows"]:
            if r.get("compressor", "none") != "none" or r["size"] < from_bytes:
                continue
            key = (run["ranks"], r["size"], r["inplace"])
            if r["algo"] == "auto" and r.get("auto_choice"):
                if id(run) in judged:
                    picks.setdefault(key, []).append(r["auto_choice"])
            elif r["algo"] in candidates:
                times.setdefault(key, {}).setdefault(r["algo"], []).append(r["time_us"])
    out = []
    for key in sorted(picks):
        med = {a: statistics.median(ts) for a, ts in times.get(key, {}).items()}
        chosen = [a for a in picks[key] if a in med]
        if not chosen:
            continue
        best = min(med, key=lambda a: (med[a], a))
        ranks, size, inplace = key
        out.append({"ranks": ranks, "size": size, "inplace": inplace,
                    "runs": len(picks[key]), "picks": dict(Counter(chosen)), "best": best,
                    "median_us": {a: round(t, 1) for a, t in sorted(med.items())},
                    "regret": round(statistics.median(med[a] / med[best] for a in chosen), 4)})
    return out


def summary(table: list[dict[str, Any]], goal: float = GOAL) -> dict[str, Any]:
    """Median and worst regret per number of ranks and over all, and the cells over ``goal``.

    Example::

        >>> s = summary([{"ranks": 2, "size": 1 << 20, "inplace": False, "regret": 1.0},
        ...              {"ranks": 2, "size": 1 << 21, "inplace": False, "regret": 1.2}])
        >>> s["all"]["max"], s["over_goal"]
        (1.2, 1)
    """
    def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
        values = [r["regret"] for r in rows]
        return {"cells": len(values), "median": statistics.median(values), "max": max(values),
                "over_goal": sum(v > goal for v in values)}

    per = {str(p): stats([r for r in table if r["ranks"] == p])
           for p in sorted({r["ranks"] for r in table})}
    every = stats(table) if table else {"cells": 0, "median": None, "max": None, "over_goal": 0}
    return {"goal": goal, "per_ranks": per, "all": every, "over_goal": every["over_goal"]}


def markdown(table: list[dict[str, Any]], summ: dict[str, Any], files: list[str],
             reference: list[str], argv: list[str]) -> str:
    """The report: how it was made, the summary per number of ranks, then every cell."""
    lines = ["# auto's regret on shared memory (compcoll bench regret)", "",
             f"command: `compcoll {' '.join(argv)}`", "",
             f"runs judged: {len(files)}; reference runs (times only): {len(reference)}", "",
             f"regret = median over the judged runs of t_med(the run's pick) / t_med(best "
             f"algorithm); t_med is each algorithm's median time over all runs read; goal <= "
             f"{summ['goal']:.2f}",
             "", "| ranks | cells | median regret | max regret | cells over goal |",
             "|---|---|---|---|---|"]
    for p, s in summ["per_ranks"].items():
        lines.append(f"| {p} | {s['cells']} | {s['median']:.3f} | {s['max']:.3f} | "
                     f"{s['over_goal']} |")
    a = summ["all"]
    if a["cells"]:
        lines.append(f"| all | {a['cells']} | {a['median']:.3f} | {a['max']:.3f} | "
                     f"{a['over_goal']} |")
    lines += ["", "| ranks | size (B) | placement | auto picked (runs) | best (median) | "
              "regret | median times (us) |", "|---|---|---|---|---|---|---|"]
    for r in table:
        picked = ", ".join(f"{a} x{n}" for a, n in r["picks"].items())
        med = ", ".join(f"{a} {t:.0f}" for a, t in r["median_us"].items())
        flag = " **over**" if r["regret"] > summ["goal"] else ""
        lines.append(f"| {r['ranks']} | {r['size']} | "
                     f"{'in place' if r['inplace'] else 'out of place'} | {picked} | "
                     f"{r['best']} | {r['regret']:.3f}{flag} | {med} |")
    return "\n".join(lines) + "\n"


def _read(paths: list[str]) -> list[dict[str, Any]]:
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        if not isinstance(runs[-1], dict) or "rows" not in runs[-1] or "ranks" not in runs[-1]:
            raise UsageError(f"{path} is not a bench allreduce --json file (no rows/ranks)")
    return runs


@command("bench regret", arguments=_arguments)
def run(args: argparse.Namespace) -> int:
    runs, reference = _read(args.files), _read(args.reference)
    table = cells(runs, args.from_bytes, reference)
    if not table:
        raise UsageError("no cell has both an auto row and its pick's row from "
                         f"{args.from_bytes} B; run bench allreduce with --algo ...,auto")
    summ = summary(table)
    text = markdown(table, summ, args.files, args.reference, args.argv)
    print(text, end="")
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": ["compcoll", *args.argv],
                       "date": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"),
                       "files": args.files, "reference": args.reference, "summary": summ,
                       "cells": table}, f, indent=1)
            f.write("\n")
    print(f"# regret over {summ['goal']:.2f} in {summ['over_goal']} of "
          f"{summ['all']['cells']} cells", file=sys.stderr)
    return 0

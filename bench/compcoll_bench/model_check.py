"""How close the alpha-beta-gamma cost model comes to measured allreduce times, and how close
it could come at best.

Runs (or reads) one ``compcoll bench allreduce --json`` file, fits the model ``--fits`` times
(each ``compcoll model --fitted`` is a new launch, so the spread of the fitted parameters shows
too) and tabulates each fit's error per (size, algorithm). Then it asks the question a fit
cannot answer: is there *any* alpha, beta, gamma for which every modelled algorithm's formula
lands within the target of the measurements? It finds the parameters that minimise the largest
|log(model / measured)| over the rows (Nelder-Mead from several starts), with every algorithm
and without the tree, and prints that best possible error. If even that misses the target,
the formulas, not the probes, are what this machine defeats.

    python -m compcoll_bench.model_check -np 4 --run --out bench/results/model/model_fitted_np4.txt
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from collectives import costmodel

SIZES = ["-b", "1M", "-e", "64M", "-f", "4", "-n", "10", "-w", "2"]
ALGOS = "ring,tree,recursive_doubling,rabenseifner,auto"


def compcoll(*args: str) -> str:
    cmd = [sys.executable, "-m", "compcoll_bench", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
    return done.stdout


def errors(text: str) -> tuple[str, dict[tuple[int, str], tuple[float, str]]]:
    """The fit's header line and {(size, algo): (measured us, error)} of its comparison."""
    head = next(line for line in text.splitlines() if "fitted on" in line)
    rows = {}
    table = text.split("## model vs measured", 1)[1]
    for line in table.splitlines():
        m = re.match(r"\s*(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([+-]\d+%)", line)
        if m:
            rows[(int(m[1]), m[2])] = (float(m[3]), m[5])
    return head, rows


def best_fit(data: list[tuple[str, int, float]], p: int) -> tuple[costmodel.CostParams, float,
                                                                   list[float]]:
    """Parameters minimising the largest |log(model/measured)| over ``data``."""
    def errs(x: np.ndarray) -> list[float]:
        c = costmodel.CostParams(*np.exp(x))
        return [math.log(costmodel.predict(a, p, n, c) / t) for a, n, t in data]

    best = None
    for a0, b0, g0 in ((1e-4, 3e-10, 2e-10), (1e-5, 1e-9, 1e-10), (1e-6, 1e-10, 1e-9)):
        res = minimize(lambda x: max(abs(e) for e in errs(x)),
                       np.log([a0, b0, g0]), method="Nelder-Mead",
                       options={"maxiter": 6000, "xatol": 1e-7, "fatol": 1e-9})
        if best is None or res.fun < best.fun:
            best = res
    return costmodel.CostParams(*np.exp(best.x)), math.expm1(best.fun), errs(best.x)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-np", dest="np", type=int, default=4)
    ap.add_argument("--bench", default=None, help="bench JSON (default: "
                    "bench/results/model/allreduce_shm_np{N}_model_check.json)")
    ap.add_argument("--run", action="store_true", help="run the bench first (else read it)")
    ap.add_argument("--fits", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    bench = args.bench or f"bench/results/model/allreduce_shm_np{args.np}_model_check.json"
    bench_cmd = ["bench", "allreduce", "-np", str(args.np), *SIZES, "--algo", ALGOS]
    if args.run:
        compcoll(*bench_cmd, "--json", bench)
    fits = [compcoll("model", "--fitted", "-np", str(args.np), "--compressor", "none",
                     "--compare", bench) for _ in range(args.fits)]
    parsed = [errors(f) for f in fits]
    keys = sorted(parsed[0][1], key=lambda k: (k[0], ALGOS.split(",").index(k[1])))
    lines = [f"# compcoll model --fitted -np {args.np} --compressor none --compare {bench}",
             f"# {args.fits} fits (each a new launch) against one bench run (compcoll "
             f"{' '.join(bench_cmd)})",
             "# error of the prediction for the algorithm each row ran: "
             "(model - measured) / measured", ""] + [h for h, _ in parsed] + [""]
    lines.append(f"{'size(B)':>10} {'algo':>20} {'measured(us)':>13} " +
                 " ".join(f"{'fit ' + str(i + 1):>7}" for i in range(args.fits)))
    for k in keys:
        lines.append(f"{k[0]:>10} {k[1]:>20} {parsed[0][1][k][0]:>13.1f} " +
                     " ".join(f"{p[1].get(k, (0, '?'))[1]:>7}" for p in parsed))
    rows = json.loads(Path(bench).read_text())["rows"]
    data = [(r["algo"], int(r["size"]), r["time_us"] * 1e-6) for r in rows
            if r["algo"] in costmodel.MODELED and r["size"] >= 1 << 20]
    lines += ["", "## best possible parameters (minimax |log(model/measured)| over the rows)"]
    for label, subset in (("every modelled algorithm", data),
                          ("without tree", [d for d in data if d[0] != "tree"])):
        c, worst, errs = best_fit(subset, args.np)
        lines.append(f"# {label}: alpha {c.alpha * 1e6:.3g} us, beta {c.beta:.3g} s/B, "
                     f"gamma {c.gamma:.3g} s/B -> largest error {worst:+.0%}")
        lines.append("#   " + ", ".join(f"{a} {n >> 20}M {math.expm1(e):+.0%}"
                                          for (a, n, _), e in zip(subset, errs, strict=True)))
    for i, f in enumerate(fits):
        lines += ["", f"## fit {i + 1}: full output", f.rstrip()]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

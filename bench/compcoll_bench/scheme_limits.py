"""Where each compressed scheme loses, according to the cost model.

For a 1 Gbit/s cluster (alpha = 50 us, beta = 8 ns/B, gamma from this machine's reduction
kernel) and codec rates measured here, prices every compressor's cheapest scheme against the
plain allreduce over a grid of message sizes and node counts, and writes the break-even size
per node count and the node count where each compressor stops paying at 64 MB.

    python -m compcoll_bench.scheme_limits --out bench/results/compressed/scheme_limits.md

(without ``--out`` it writes ``compcoll-results/scheme_limits.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collectives import costmodel
from collectives.costmodel import CostParams
from compcoll_bench import forecast

SPECS = ["fp16", "uniform:bits=8", "uniform:bits=4", "sign", "topk:ratio=0.01",
         "randomk:ratio=0.01", "powersgd:rank=4"]
NODES = [2, 4, 16, 64, 256, 1024]
SIZES = [1 << s for s in range(10, 31)]  # 1 KiB .. 1 GiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="compcoll-results/scheme_limits.md",
                    help="Markdown result file (default compcoll-results/scheme_limits.md)")
    ap.add_argument("--alpha", type=float, default=50e-6)
    ap.add_argument("--beta", type=float, default=8e-9)
    args = ap.parse_args(argv)
    c = CostParams(args.alpha, args.beta, costmodel.measure_gamma())
    rates = {s: forecast.measure_codec(s) for s in SPECS}
    lines = ["# Where each compressed scheme loses (cost model)", "",
             f"alpha = {c.alpha * 1e6:.0f} us, beta = {c.beta * 1e9:.1f} ns/B "
             f"({8 / c.beta / 1e9:.2f} Gbit/s), gamma = {c.gamma * 1e12:.0f} ps/B; codec rates "
             "measured on this machine (one core). Cell: the smallest message size from which "
             "the compressor's cheapest scheme beats the plain allreduce ('-' = never up to "
             "1 GiB), and that scheme.", "",
             "| compressor | " + " | ".join(f"p={p}" for p in NODES) + " |",
             "|---|" + "---|" * len(NODES)]
    for spec in SPECS:
        cells = []
        for p in NODES:
            cell = "-"
            for size in SIZES:
                plain = forecast.best(p, size, c)[1]
                row = forecast.price_compressor(spec, p, size, c, rates[spec])
                if row["time_s"] is not None and row["time_s"] < plain:
                    cell = f"{_size(size)} ({row['scheme']})"
                    break
            cells.append(cell)
        lines.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    lines += ["", "At 64 MiB: predicted speed-up over the plain allreduce (< 1: the scheme "
              "loses).", "", "| compressor | " + " | ".join(f"p={p}" for p in NODES) + " |",
              "|---|" + "---|" * len(NODES)]
    for spec in SPECS:
        cells = []
        for p in NODES:
            plain = forecast.best(p, 64 << 20, c)[1]
            row = forecast.price_compressor(spec, p, 64 << 20, c, rates[spec])
            cells.append(f"{plain / row['time_s']:.2f}" if row["time_s"] else "-")
        lines.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out}")
    return 0


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


if __name__ == "__main__":
    raise SystemExit(main())

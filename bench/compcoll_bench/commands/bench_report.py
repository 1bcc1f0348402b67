"""The benchmark's outputs: the table on stdout, and JSON, CSV and a busbw plot on request."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import noise

Column = tuple[str, str, int, str]  # (row key, header, width, format)

# The JSON and CSV rows carry every key of a row, one row per placement (out of place, in
# place). The table puts both placements of a (size, algorithm, compressor) on one line, as
# nccl-tests does: the lead columns, then time, spread, bandwidths and #wrong of each
# placement, then the tail (the first placement's). It stays within ``benchlib.TABLE_WIDTH``
# columns: what is the same on every line (the type, named in the title) and what the JSON
# holds in full (p25 to p99 of the calls; a compressed row's compress, communicate and
# decompress times, its bytes sent) is left out of it. Times are medians per call
# (``time_us``), beside the spread of the calls (``noise``: their iqr as a % of the median);
# a ratio within that spread ends in ``~``.
HALF: list[Column] = [
    ("time_us", "time(us)", 8, "{:.1f}"),
    ("spread", "iqr%", 4, "pct"),
    ("algbw_GBps", "algbw", 5, "bw"),
    ("busbw_GBps", "busbw", 5, "bw"),
    ("wrong", "#wrong", 6, "{:d}"),
]
TAIL: list[Column] = [
    ("ratio_vs_mpi", "vs MPI", 6, "ratio"),
    ("model_us", "model", 8, "{:.1f}"),  # the cost model's time (us)
]
# With compressors: busbw is the effective busbw (of the uncompressed bytes, comparable with
# MPI_Allreduce's; algbw is the same number over the constant 2(p-1)/p), and the tail shows
# the relative error instead of the model's time (the cost model prices uncompressed rows).
HALF_COMPRESSED: list[Column] = [
    ("time_us", "time(us)", 8, "{:.1f}"),
    ("spread", "iqr%", 4, "pct"),
    ("busbw_GBps", "effbusbw", 8, "bw"),
    ("wrong", "#wrong", 6, "{:d}"),
]
TAIL_COMPRESSED: list[Column] = [
    ("ratio_vs_mpi", "vs MPI", 6, "ratio"),
    ("rel_error", "rel.err", 8, "{:.2e}"),
]
#: What the two MPI rows are (printed above the table).
LEGEND = ("MPI_Allreduce: the MPI library's blocking MPI_Allreduce called directly (the "
          "baseline of 'vs MPI', its time over the row's); mpi: the same library's "
          "MPI_Iallreduce reached through compcoll's API (the difference is compcoll's per-call "
          "cost); algbw, busbw in GB/s (1e9 B/s)")
#: What a compressed row's error means (printed under the table when compressors ran).
ERROR_NOTE = ("rel.err: ||result - exact sum|| / ||exact sum|| of one call, the last of "
              "several on the same input. Without error feedback (--no-feedback) it is "
              "the compressor's error. With error feedback a call also sends the residual the "
              "calls before it left out, so one call's error can exceed 1 (a sparsifier's); "
              "the residual is carried to the next step, not lost, so what matters in "
              "training is the error accumulated over steps, not one call's")


@dataclass(frozen=True)
class Layout:
    """The table's columns: lead, one half per placement, tail."""

    lead: list[Column]
    half: list[Column]
    tail: list[Column]
    places: list[bool]  # inplace flag of each half, in order


def algo_width(names: list[str], modeled: tuple[str, ...]) -> int:
    """The widest algorithm cell: a name, or ``auto:<its pick>`` for auto's rows."""
    shown = [*names, *(f"auto:{m}" for m in modeled if "auto" in names)]
    return max(len("algo"), *map(len, shown))


def layout(places: list[bool], *, algo: int, max_size: int, itemsize: int,
           compressors: list[str] | None = None) -> Layout:
    """The columns for these placements, sized to the run: ``algo`` wide algorithm names
    (:func:`algo_width`), sizes up to ``max_size`` bytes of ``itemsize``-byte elements; with
    ``compressors`` (the specs other than none), a compressor column, the effective busbw and
    the relative error."""
    lead: list[Column] = [("size", "size(B)", max(8, len(str(max_size))), "{:d}")]
    if not compressors:
        lead.append(("count", "count", max(5, len(str(max_size // itemsize))), "{:d}"))
    lead += [("op", "redop", 5, "{}"), ("algo", "algo", algo, "{}")]
    if not compressors:
        return Layout(lead, HALF, TAIL, places)
    lead.append(("compressor", "compressor", max(10, *map(len, compressors)), "{}"))
    return Layout(lead, HALF_COMPRESSED, TAIL_COMPRESSED, places)


def _cells(cols: list[Column]) -> str:
    return " ".join(f"{h:>{w}}" for _, h, w, _ in cols)


def header(lay: Layout) -> list[str]:
    """Two header lines: the placements over their halves, then the column names (GB/s are
    1e9 bytes per second, as in nccl-tests)."""
    lead, half = _cells(lay.lead), _cells(lay.half)
    tops = [f"{'in-place' if p else 'out-of-place':^{len(half)}}" for p in lay.places]
    first = f"#{' ' * (len(lead) - 1)} {' '.join(tops)}".rstrip()
    names = " ".join([lead, *([half] * len(lay.places)), _cells(lay.tail)])
    return [first, f"#{names[1:]}"]


def _bandwidth(value: float) -> str:
    """GB/s in at most 6 characters, 4 significant digits up to 9999.9."""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


#: The formats that are not a ``str.format`` pattern: (value, its row) -> text.
_FORMATS: dict[str, Callable[[Any, dict[str, Any]], str]] = {
    "bw": lambda value, row: _bandwidth(value),
    "pct": lambda value, row: noise.percent(value),
    "ratio": lambda value, row: noise.ratio_cell(value, row.get("noisy")),
}


def _value(row: dict[str, Any], key: str, fmt: str, width: int) -> str:
    value = row.get(key)
    if key == "algo" and row.get("auto_choice"):
        value = f"auto:{row['auto_choice']}"
    if value is None and fmt != "ratio":  # a missing ratio keeps the flag's place
        text = "-"
    else:
        text = _FORMATS[fmt](value, row) if fmt in _FORMATS else fmt.format(value)
    return f"{text:>{width}}"


def format_line(rows: list[dict[str, Any]], lay: Layout) -> str:
    """One table line from the rows of one (size, algorithm, compressor), one per placement
    in ``lay.places`` order; a missing value prints as ``-``."""
    first = rows[0]
    cells = [_value(first, k, f, w) for k, _, w, f in lay.lead]
    for row in rows:
        cells += [_value(row, k, f, w) for k, _, w, f in lay.half]
    cells += [_value(first, k, f, w) for k, _, w, f in lay.tail]
    return " ".join(cells)


def footer(rows: list[dict[str, Any]]) -> list[str]:
    """nccl-tests' closing lines: the wrong elements over every row, and the average bus
    bandwidth over all sizes and placements, per algorithm (and compressor)."""
    wrong = sum(int(r["wrong"]) for r in rows)
    bad = sum(1 for r in rows if r["wrong"] or not r["ranks_agree"])
    per: dict[str, list[float]] = {}
    for r in rows:
        key = r["algo"] if r.get("compressor", "none") == "none" else \
            f"{r['algo']}+{r['compressor']}"
        per.setdefault(key, []).append(float(r["busbw_GBps"]))
    lines = [f"# Out of bounds values : {wrong} {'OK' if not bad else 'FAILED'}"]
    lines += [f"# Avg bus bandwidth    : {sum(v) / len(v):8.3f} GB/s  {k}"
              for k, v in per.items()]
    return lines


#: Sizes from which ``auto``'s regret is judged on shared memory (below it, per-call costs
#: of a few tens of microseconds decide and no algorithm's choice matters much).
REGRET_FROM = 1 << 20


def regret(rows: list[dict[str, Any]], modeled: tuple[str, ...],
           from_bytes: int = REGRET_FROM) -> list[dict[str, Any]]:
    """``auto``'s regret at each size and placement from ``from_bytes``: the time of the
    algorithm it picked over the best modeled algorithm's, both as measured in their own rows
    of the same run (``pick``: the decision alone), and ``auto``'s own row over the best
    (``own``: the decision plus the run's noise and the cost of choosing).

    Example::

        >>> rows = [{"size": 1 << 20, "inplace": False, "compressor": "none", "algo": a,
        ...          "time_us": t, "auto_choice": c} for a, t, c in
        ...         [("ring", 120.0, None), ("tree", 100.0, None), ("auto", 125.0, "ring")]]
        >>> [(r["best"], r["pick"], r["own"]) for r in regret(rows, ("ring", "tree"))]
        [('tree', 1.2, 1.25)]
    """
    cells: dict[tuple[int, bool], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r.get("compressor", "none") == "none" and r["size"] >= from_bytes:
            cells.setdefault((r["size"], r["inplace"]), {})[r["algo"]] = r
    out = []
    for (size, inplace), by in sorted(cells.items()):
        auto = by.get("auto")
        timed = {a: by[a]["time_us"] for a in modeled if a in by}
        if auto is None or auto.get("auto_choice") not in timed:
            continue
        best = min(timed, key=lambda a: (timed[a], a))
        out.append({"size": size, "inplace": inplace, "choice": auto["auto_choice"],
                    "best": best, "pick": round(timed[auto["auto_choice"]] / timed[best], 4),
                    "own": round(auto["time_us"] / timed[best], 4)})
    return out


def regret_lines(table: list[dict[str, Any]]) -> list[str]:
    """The footer's summary of :func:`regret` (nothing when auto or its rivals did not run)."""
    if not table:
        return []
    worst = max(table, key=lambda r: r["pick"])
    picks = sorted(r["pick"] for r in table)
    owns = sorted(r["own"] for r in table)
    where = "in place" if worst["inplace"] else "out of place"
    return [f"# auto regret from {REGRET_FROM >> 20} MB (its pick's time / the best "
            f"algorithm's, same size and placement, {len(table)} cells): "
            f"median {picks[len(picks) // 2]:.3f}, max {worst['pick']:.3f} "
            f"({worst['choice']} against {worst['best']} at {worst['size']} B {where}); "
            f"auto's own row: median {owns[len(owns) // 2]:.3f}, max {owns[-1]:.3f}"]


def write_json(path: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
        f.write("\n")


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def require_matplotlib() -> None:
    """Fail before a long sweep, not after it, when --plot cannot be honoured."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("compcoll: --plot needs matplotlib; pip install "
                         "'compcoll[bench]'") from None
    matplotlib.use("Agg")  # files only: no display needed, none opened


def _band(rows: list[dict[str, Any]]) -> list[list[float]]:
    """The busbw each row reaches at its p75 and p25 times, as matplotlib's (below, above)
    error bars around its median's (none where the row has no quartiles)."""
    below, above = [], []
    for r in rows:
        bw, mid, p25, p75 = r["busbw_GBps"], r["time_us"], r.get("p25_us"), r.get("p75_us")
        below.append(bw * (1 - mid / p75) if p75 else 0.0)
        above.append(bw * (mid / p25 - 1) if p25 else 0.0)
    return [below, above]


def plot(path: str, rows: list[dict[str, Any]], title: str,
         limit_GBps: float | None = None) -> None:
    """busbw against message size (log x), one line per algorithm and compressor (compressed
    rows: effective busbw), each point the median call's with a bar from the p75 call's busbw
    to the p25 call's (the interquartile range); ``limit_GBps`` draws the link's rate as a
    horizontal line (the busbw an optimal allreduce reaches on that link)."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8 if limit_GBps is None else 9.5, 5))
    for key in dict.fromkeys((row["algo"], row.get("compressor", "none")) for row in rows):
        mine = [row for row in rows if (row["algo"], row.get("compressor", "none")) == key]
        label = key[0] if key[1] == "none" else f"{key[0]} + {key[1]}"
        ax.errorbar([r["size"] for r in mine], [r["busbw_GBps"] for r in mine],
                    yerr=_band(mine), marker="o", capsize=2, label=label,
                    linestyle="--" if key[0] == "MPI_Allreduce" else "-")
    if limit_GBps is not None:
        ax.axhline(limit_GBps, color="black", linestyle=":",
                   label=f"link rate ({limit_GBps * 1e3:.0f} MB/s)")
        # compressed rows' effective busbw may pass the link rate: keep them in view
        top = max([limit_GBps] + [r["busbw_GBps"] for r in rows if r.get("busbw_GBps")])
        ax.set_ylim(0, top * 1.1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    compressed = any(row.get("compressor", "none") != "none" for row in rows)
    ax.set_ylabel(f"bus bandwidth (GB/s{'; compressed: effective' if compressed else ''})")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if limit_GBps is None:
        ax.legend()
    else:  # the curves fill the plot up to the link line: legend beside it
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

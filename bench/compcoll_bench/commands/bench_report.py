"""The benchmark's outputs: the table on stdout, and JSON, CSV and a busbw plot on request."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Any

Column = tuple[str, str, int, str]  # (row key, header, width, format)

# The JSON and CSV rows carry every key of a row, one row per placement (out of place, in
# place). The table puts both placements of a (size, algorithm, compressor) on one line, as
# nccl-tests does: the lead columns, then time, algbw, busbw and #wrong of each placement, then
# the tail (the first placement's). Times are medians per call (``time_us``); p90 and p99 of
# the slower calls are in the JSON.
LEAD: list[Column] = [
    ("size", "size(B)", 11, "{:d}"),
    ("count", "count", 10, "{:d}"),
    ("type", "type", 8, "{}"),
    ("op", "redop", 5, "{}"),
    ("algo", "algo", 24, "{}"),
]
HALF: list[Column] = [
    ("time_us", "time(us)", 10, "{:.1f}"),
    ("algbw_GBps", "algbw", 7, "{:.3f}"),
    ("busbw_GBps", "busbw", 7, "{:.3f}"),
    ("wrong", "#wrong", 6, "{:d}"),
]
TAIL: list[Column] = [
    ("ratio_vs_mpi", "vs MPI", 7, "{:.2f}"),
    ("model_us", "model(us)", 10, "{:.1f}"),
]
# Added when compressors run. Their algbw and busbw count the uncompressed bytes (effective
# bandwidth, comparable with MPI_Allreduce's); comm(us) is the time less compress and
# decompress.
COMPRESSED: list[Column] = [
    ("compress_us", "comp(us)", 10, "{:.1f}"),
    ("comm_us", "comm(us)", 10, "{:.1f}"),
    ("decompress_us", "decomp(us)", 10, "{:.1f}"),
    ("rel_error", "rel.err", 9, "{:.2e}"),
]
#: What the two MPI rows are (printed above the table).
LEGEND = ("# MPI_Allreduce: the MPI library's blocking MPI_Allreduce called directly (the "
          "baseline of 'vs MPI'); mpi: the same library's MPI_Iallreduce reached through "
          "compcoll's API (the difference is compcoll's per-call cost)")


@dataclass(frozen=True)
class Layout:
    """The table's columns: lead, one half per placement, tail."""

    lead: list[Column]
    half: list[Column]
    tail: list[Column]
    places: list[bool]  # inplace flag of each half, in order


def layout(places: list[bool], compressor_width: int = 0) -> Layout:
    """The columns for these placements; with a compressor column this wide, also the
    compressed rows' time split and error, and busbw named as the effective busbw."""
    if not compressor_width:
        return Layout(LEAD, HALF, TAIL, places)
    half = [c if c[0] != "busbw_GBps" else (c[0], "effbusbw", 8, c[3]) for c in HALF]
    lead = [*LEAD, ("compressor", "compressor", max(compressor_width, 10), "{}")]
    return Layout(lead, half, [*TAIL, *COMPRESSED], places)


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


def _value(row: dict[str, Any], key: str, fmt: str, width: int) -> str:
    value = row.get(key)
    if key == "algo" and row.get("auto_choice"):
        value = f"auto:{row['auto_choice']}"
    return f"{'-' if value is None else fmt.format(value):>{width}}"


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


def plot(path: str, rows: list[dict[str, Any]], title: str,
         limit_GBps: float | None = None) -> None:
    """busbw against message size (log x), one line per algorithm and compressor (compressed
    rows: effective busbw); ``limit_GBps`` draws the link's rate as a horizontal line (the busbw
    an optimal allreduce reaches on that link)."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8 if limit_GBps is None else 9.5, 5))
    for key in dict.fromkeys((row["algo"], row.get("compressor", "none")) for row in rows):
        mine = [row for row in rows if (row["algo"], row.get("compressor", "none")) == key]
        label = key[0] if key[1] == "none" else f"{key[0]} + {key[1]}"
        ax.plot([r["size"] for r in mine], [r["busbw_GBps"] for r in mine], marker="o",
                label=label, linestyle="--" if key[0] == "MPI_Allreduce" else "-")
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

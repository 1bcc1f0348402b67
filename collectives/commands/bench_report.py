"""The benchmark's outputs: the table on stdout, and JSON, CSV and a busbw plot on request."""

from __future__ import annotations

import csv
import json
from typing import Any

# (row key, header, width, format); the JSON and CSV rows carry every key of a row.
COLUMNS = [
    ("size", "size(B)", 11, "{:d}"),
    ("count", "count", 10, "{:d}"),
    ("type", "type", 8, "{}"),
    ("algo", "algo", 24, "{}"),
    ("time_us", "time(us)", 10, "{:.1f}"),
    ("p90_us", "p90(us)", 10, "{:.1f}"),
    ("algbw_GBps", "algbw(GB/s)", 11, "{:.3f}"),
    ("busbw_GBps", "busbw(GB/s)", 11, "{:.3f}"),
    ("ratio_vs_mpi", "vs MPI", 7, "{:.2f}"),
    ("model_us", "model(us)", 10, "{:.1f}"),
    ("wrong", "#wrong", 7, "{:d}"),
]


def header() -> str:
    """The table's header line (GB/s are 1e9 bytes per second, as in nccl-tests)."""
    names = " ".join(f"{h:>{w}}" for _, h, w, _ in COLUMNS)
    return f"#{names[1:]}"


def format_row(row: dict[str, Any]) -> str:
    """One table line; a missing value prints as ``-``."""
    cells = []
    for key, _, width, fmt in COLUMNS:
        value = row.get(key)
        if key == "algo" and row.get("auto_choice"):
            value = f"auto:{row['auto_choice']}"
        cells.append(f"{'-' if value is None else fmt.format(value):>{width}}")
    return " ".join(cells)


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
    """busbw against message size (log x), one line per algorithm; ``limit_GBps`` draws the
    link's rate as a horizontal line (the busbw an optimal allreduce reaches on that link)."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8 if limit_GBps is None else 9.5, 5))
    for algo in dict.fromkeys(row["algo"] for row in rows):
        mine = [row for row in rows if row["algo"] == algo]
        ax.plot([r["size"] for r in mine], [r["busbw_GBps"] for r in mine], marker="o",
                label=algo, linestyle="--" if algo == "MPI_Allreduce" else "-")
    if limit_GBps is not None:
        ax.axhline(limit_GBps, color="black", linestyle=":",
                   label=f"link rate ({limit_GBps * 1e3:.0f} MB/s)")
        ax.set_ylim(0, limit_GBps * 1.1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if limit_GBps is None:
        ax.legend()
    else:  # the curves fill the plot up to the link line: legend beside it
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""The benchmark's outputs: the table on stdout, and JSON, CSV and a busbw plot on request."""

from __future__ import annotations

import csv
import json
from typing import Any

Column = tuple[str, str, int, str]  # (row key, header, width, format)

# The JSON and CSV rows carry every key of a row; the table shows these. Times are per call:
# p50 is the median (``time_us``), p90 and p99 the slower calls.
COLUMNS: list[Column] = [
    ("size", "size(B)", 11, "{:d}"),
    ("count", "count", 10, "{:d}"),
    ("type", "type", 8, "{}"),
    ("algo", "algo", 24, "{}"),
    ("time_us", "p50(us)", 10, "{:.1f}"),
    ("p90_us", "p90(us)", 10, "{:.1f}"),
    ("p99_us", "p99(us)", 10, "{:.1f}"),
    ("algbw_GBps", "algbw(GB/s)", 11, "{:.3f}"),
    ("busbw_GBps", "busbw(GB/s)", 11, "{:.3f}"),
    ("ratio_vs_mpi", "vs MPI", 7, "{:.2f}"),
    ("model_us", "model(us)", 10, "{:.1f}"),
    ("wrong", "#wrong", 7, "{:d}"),
]
# Added when compressors run. Their algbw and busbw count the uncompressed bytes (effective
# bandwidth, comparable with MPI_Allreduce's); comm(us) is p50 - compress - decompress.
COMPRESSED: list[Column] = [
    ("compress_us", "comp(us)", 10, "{:.1f}"),
    ("comm_us", "comm(us)", 10, "{:.1f}"),
    ("decompress_us", "decomp(us)", 10, "{:.1f}"),
    ("rel_error", "rel.err", 9, "{:.2e}"),
]


def columns(compressor_width: int = 0) -> list[Column]:
    """The table's columns: the dense ones, or with a compressor column this wide, the
    compressed rows' time split and error, and busbw named as the effective busbw."""
    if not compressor_width:
        return COLUMNS
    cols = [c if c[0] != "busbw_GBps" else (c[0], "effbusbw(GB/s)", 14, c[3]) for c in COLUMNS]
    at = [c[0] for c in cols].index("algo") + 1
    return [*cols[:at], ("compressor", "compressor", max(compressor_width, 10), "{}"),
            *cols[at:-1], *COMPRESSED, cols[-1]]


def header(cols: list[Column] = COLUMNS) -> str:
    """The table's header line (GB/s are 1e9 bytes per second, as in nccl-tests)."""
    names = " ".join(f"{h:>{w}}" for _, h, w, _ in cols)
    return f"#{names[1:]}"


def format_row(row: dict[str, Any], cols: list[Column] = COLUMNS) -> str:
    """One table line; a missing value prints as ``-``."""
    cells = []
    for key, _, width, fmt in cols:
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

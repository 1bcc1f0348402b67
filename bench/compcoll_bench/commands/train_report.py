"""``bench train``'s outputs: the table, JSON, and a PNG of the loss curves."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

COLUMNS = [("model", "model", 8, "{}"), ("run", "run", 9, "{}"),
           ("step_ms", "step(ms)", 9, "{:.1f}"), ("compute_ms", "compute(ms)", 11, "{:.1f}"),
           ("comm_share", "comm%", 6, "{:.0%}"), ("overlap", "overlap", 7, "{:.0%}"),
           ("payload_kb", "payload(KB)", 11, "{:.1f}"), ("final_loss", "loss", 7, "{:.3f}"),
           ("metric", "metric", 8, "{:.3f}"), ("metric_name", "", 13, "{}")]


Column = tuple[str, str, int, str]  # (row key, heading, width, format)


def header(columns: list[Column] = COLUMNS) -> str:
    return " ".join(f"{h:>{w}}" for _, h, w, _ in columns)


def format_row(row: dict[str, Any], columns: list[Column] = COLUMNS,
               missing: Callable[[str, dict[str, Any]], str] = lambda key, row: "-") -> str:
    """One table line; ``missing(key, row)`` is the text of an absent value."""
    cells = []
    for key, _, width, fmt in columns:
        v = row.get(key)
        cells.append(f"{missing(key, row) if v is None else fmt.format(v):>{width}}")
    return " ".join(cells)


PHASES: list[Column] = [
    ("model", "model", 8, "{}"), ("run", "run", 9, "{}"), ("step_ms", "step", 7, "{:.1f}"),
    ("compute_ms", "compute", 7, "{:.1f}"), ("hook_ms", "in-hook", 7, "{:.2f}"),
    ("encode_ms", "encode", 7, "{:.2f}"), ("wire_ms", "wire", 7, "{:.2f}"),
    ("decode_ms", "decode", 7, "{:.2f}"), ("copy_ms", "copy", 6, "{:.2f}"),
    ("exposed_ms", "exposed", 7, "{:.2f}"), ("bound_ms", "bound", 7, "{:.2f}"),
    ("over_bound", "/bound", 6, "{:.2f}"), ("over_fp16", "/fp16", 6, "{:.2f}")]


def overhead_vs_fp16(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Per row (by index): its step's overhead over compute-only against the fp16 hook's on the
    same model, (step - compute) / (fp16 step - compute), with compute the median of the
    model's runs' compute-only times (each run measures it over a few steps of its own: one
    pooled value keeps that noise out of the ratio). Empty for a model without an fp16 run."""
    out: dict[int, float] = {}
    for model in {r["model"] for r in rows}:
        mine = [(i, r) for i, r in enumerate(rows) if r["model"] == model]
        fp16 = [r for _, r in mine if r["run"] == "fp16"]
        if not fp16:
            continue
        compute = sorted(r["compute_ms"] for _, r in mine)[len(mine) // 2]
        base = fp16[0]["step_ms"] - compute
        if base > 0:
            out.update({i: (r["step_ms"] - compute) / base for i, r in mine})
    return out


def phase_lines(rows: list[dict[str, Any]], link: dict[str, Any] | None) -> list[str]:
    """Where each step's time goes, per run (ms a step): the step and the same work without
    communication (medians), then for our hook the means over the steady steps of the time
    inside the hook on backward's path (grouping, copies in, posting, coding started there),
    the codecs' time, the wire (the background thread's busy time less codecs and copies:
    messages and waits for the other ranks), the copies back, and what was left after the
    last bucket was handed over (exposed). On an emulated link, ``bound``: the bytes each
    host's link must carry at the least (2 (H - 1) / H of a rank's payload, reduced inside the
    host first) over its rate plus the codecs' time, and the step's time over compute-only
    against it (``/bound``)."""
    out = ["", "# where a step's time goes (ms a step): step and compute-only medians; our "
           "hook's means: in-hook on backward's path, codecs, wire and waits, copies back, "
           "exposed after the last bucket" + ("; bound: bytes over the link plus codecs, "
                                              "/bound: (step - compute) over it" if link else "")
           + "; /fp16: (step - compute) over the fp16 hook's, compute the median of the "
             "model's runs",
           " ".join(f"{h:>{w}}" for _, h, w, _ in PHASES)]
    vs_fp16 = overhead_vs_fp16(rows)
    for i, row in enumerate(rows):
        r = dict(row)
        r["over_fp16"] = vs_fp16.get(i)
        if link and r.get("encode_ms") is not None:
            hosts = link["hosts"]
            wire_s = 2 * (hosts - 1) / hosts * r["payload_kb"] * 1e3 * 8 / link["rate_bps"]
            r["bound_ms"] = wire_s * 1e3 + r["encode_ms"] + r["decode_ms"]
            r["over_bound"] = (r["step_ms"] - r["compute_ms"]) / r["bound_ms"] \
                if r["bound_ms"] > 0 else None
        out.append(format_row(r, PHASES))
    return out


def write_json(path: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
        f.write("\n")


def write_outputs(args: Any, meta: dict[str, Any], rows: list[dict[str, Any]],
                  lines: list[str], title: str) -> None:
    """What ``--json``, ``--txt`` and ``--plot`` ask for: the rows with ``meta``, the table's
    ``lines``, the loss curves under ``title``."""
    if args.json:
        write_json(args.json, meta, rows)
    if args.txt:
        with open(args.txt, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.plot:
        plot(args.plot, rows, title)


def plot(path: str, rows: list[dict[str, Any]], title: str) -> None:
    """One panel per model: every run's (smoothed) training loss against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        for r in (r for r in rows if r["model"] == model):
            loss = np.asarray(r["losses"])
            k = max(1, len(loss) // 25)
            smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
            ax.plot(np.arange(len(smooth)) + k - 1, smooth, label=r["run"])
        ax.set_title(model)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (mean over ranks)")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""One table of every ``compcoll bench tta`` result: time to target per configuration.

Usage: python scripts/tta_summary.py bench/results/tta_*.json > bench/results/tta_summary.md

Per result file (one model on one link): the link, model and batch, the compute-only step,
the time to target of DDP, PyTorch's fp16 hook, the soonest of PyTorch's compression hooks,
ours with the automatic policy (from an empty measurement cache, and again from the cache
when the file has that run), and the soonest of our fixed compressors; then auto's ratios:
against the fp16 hook, against the soonest PyTorch hook, and against our soonest fixed
compressor (below 1: auto was later); auto's final quality with DDP's best beside it. "-"
where a run did not reach the target.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TORCH = ("fp16", "bf16", "powersgd1", "powersgd")
FIXED = ("int8+ef", "int4+ef", "topk+ef", "powersgd+ef")


def _time(rows: dict[str, dict[str, Any]], name: str) -> float | None:
    row = rows.get(name)
    return None if row is None else row.get("target_s")


def _soonest(rows: dict[str, dict[str, Any]], names: tuple[str, ...]) -> tuple[str, float] | None:
    hits = [(n, _time(rows, n)) for n in names if _time(rows, n) is not None]
    return min(hits, key=lambda h: h[1]) if hits else None  # type: ignore[arg-type, return-value]


def _s(t: float | None) -> str:
    return "-" if t is None else f"{t:.1f} s"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{b / a:.2f}x"


def _quality(rows: dict[str, dict[str, Any]]) -> str:
    """auto's final smoothed quality and DDP's best (the target's reference)."""
    auto, ddp = rows.get("auto"), rows.get("ddp")
    if auto is None or ddp is None:
        return "-"
    return f"{auto['smoothed_final']:.4f} ({ddp['smoothed_best']:.4f})"


def line(path: Path) -> str:
    data = json.loads(path.read_text())
    meta, rows = data["meta"], {r["run"]: r for r in data["rows"]}
    cmd = meta["command"]
    batch = cmd[cmd.index("--batch") + 1] if "--batch" in cmd else "16"
    model = next(iter(rows.values()))["model"]
    link = meta.get("link") or "shared memory"
    compute = rows.get("compute", {}).get("median_ms")
    fp16 = rows.get("fp16", {})
    hook = _soonest(rows, TORCH)
    fixed = _soonest(rows, FIXED)
    auto = _time(rows, "auto")
    rerun = _time(rows, "auto-rerun")
    cells = [link, model, batch,
             "-" if compute is None else f"{compute:.0f} / {fp16.get('median_ms', 0):.0f}",
             _s(_time(rows, "ddp")), _s(_time(rows, "fp16")),
             "-" if hook is None else f"{hook[1]:.1f} s ({hook[0]})",
             _s(auto), _s(rerun),
             "-" if fixed is None else f"{fixed[1]:.1f} s ({fixed[0]})",
             _ratio(auto, _time(rows, "fp16")), _ratio(auto, None if hook is None else hook[1]),
             _ratio(auto, None if fixed is None else fixed[1]),
             _quality(rows), f"[{path.stem}]({path.name})"]
    return "| " + " | ".join(cells) + " |"


def main(paths: list[str]) -> None:
    print("<!-- written by: python scripts/tta_summary.py " + " ".join(paths) + " -->")
    print("| link | model | batch | step ms: compute / fp16 hook | DDP | fp16 hook | "
          "soonest PyTorch hook | ours, auto | auto from cache | soonest fixed of ours | "
          "auto vs fp16 | auto vs PyTorch | auto vs fixed | auto final (DDP best) | result |")
    print("|" + "---|" * 15)
    for p in paths:
        print(line(Path(p)))


if __name__ == "__main__":
    main(sys.argv[1:])

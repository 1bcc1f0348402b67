"""Summarise ``compcoll bench tta`` results: each of our runs against PyTorch's best option.

Usage:
    python scripts/tta_summary.py bench/results/tta [--note 'GLOB[,GLOB...]=TEXT' ...]
        (writes bench/results/tta/README.md from every tta_*.json in the folder)
    python scripts/tta_summary.py run1.json run2.json      (prints the same tables)

Per result file and model: the link and layout, the batch, the compute-only step and the fp16
hook's, then the time to target of each PyTorch option (DDP without a hook, the fp16, bf16,
PowerSGD rank 1 and rank 4 hooks, post-local SGD) and the best of them: whichever reached
the target first.
Then each of our runs (auto from an empty measurement cache, auto from the cache, every fixed
compressor) as its time to target and the best PyTorch option's time over it (above 1x: ours
reached the target sooner), auto against the fp16 hook, auto's final quality with DDP's best
beside it, and how many of auto's repeated cold runs decided alike. The date recorded in each
result and the commit that brought it in (from git) are in the first table;
``--note GLOB[,GLOB...]=TEXT`` marks results that today's code would not reproduce.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from results_index import notes_for, origin, parse_notes

#: PyTorch's options, every one a candidate for the best: DDP without a hook and its hooks.
TORCH = {"ddp": "DDP", "fp16": "fp16 hook", "bf16": "bf16 hook", "powersgd1": "PowerSGD 1",
         "powersgd": "PowerSGD 4", "postlocal": "post-local SGD"}
#: Our runs in the order shown (others that a file has follow under their own names).
OURS = {"auto": "auto", "auto-rerun": "auto, from cache", "auto-flat": "auto, flat",
        "fp16-ours": "fp16, ours", "int8+ef": "8-bit + EF",
        "int4+ef": "4-bit + EF", "topk+ef": "top-k 1% + EF", "powersgd+ef": "PowerSGD 4 + EF"}
COMPUTE = "compute"
RATE = re.compile(r"^([\d.]+)([kmgt]?)bit$")


def _rate(link: str | None) -> float:
    """A link's bits per second, for sorting (shared memory last)."""
    m = RATE.match(link or "")
    return float(m.group(1)) * 10 ** (3 * "_kmgt".index(m.group(2) or "_")) if m else 1e99


def _s(t: float) -> str:
    return f"{t:.1f} s"


def _cell(rows: dict[str, dict[str, Any]], run: str, best: float | None) -> str:
    """A run's time to target and the best PyTorch option's time over it."""
    if run not in rows:
        return "-"
    t = rows[run].get("target_s")
    if t is None:
        return "not reached"
    return _s(t) + ("" if best is None else f" ({best / t:.2f}x)")


def results(paths: list[Path]) -> list[dict[str, Any]]:
    """One record per (file, model), sorted by link rate (shared memory last) and model."""
    out = []
    for path in paths:
        data = json.loads(path.read_text())
        meta = data["meta"]
        cmd = meta["command"]
        cluster = meta.get("cluster") or {}
        link = meta.get("link")
        if cluster.get("delay_s"):
            link = f"{link}, {cluster['delay_s'] * 1e3:g} ms"
        layout = (f"{cluster['hosts']} x {cluster['ranks_per_host']}" if cluster
                  else f"{meta['ranks']} x 1" if link else f"1 x {meta['ranks']}")
        repeats = {r["model"]: r for r in meta.get("repeat_auto") or []}
        batch = cmd[cmd.index("--batch") + 1] if "--batch" in cmd else "16"  # the default
        for model in dict.fromkeys(r["model"] for r in data["rows"]):
            rows = {r["run"]: r for r in data["rows"] if r["model"] == model}
            out.append({"path": path, "model": model, "rows": rows, "meta": meta,
                        "link": link or "shared memory", "layout": layout,
                        "batch": batch, "repeat": repeats.get(model)})
    return sorted(out, key=lambda r: (_rate(r["meta"].get("link")), r["model"], r["path"].name))


def best_torch(rows: dict[str, dict[str, Any]]) -> tuple[str, float] | None:
    """The PyTorch option that reached the target first (name, seconds), if any did."""
    hits = [(n, rows[n]["target_s"]) for n in TORCH if rows.get(n, {}).get("target_s")]
    return min(hits, key=lambda h: h[1]) if hits else None


def tables(records: list[dict[str, Any]], notes: list[tuple[str, str]]) -> list[str]:
    torch = [n for n in TORCH if any(n in r["rows"] for r in records)]
    ours = [*(n for n in OURS if any(n in r["rows"] for r in records)),
            *dict.fromkeys(n for r in records for n in r["rows"]
                           if n not in TORCH and n not in OURS and n != COMPUTE)]
    head = ["result", "link", "hosts x ranks", "model", "batch/rank",
            "step ms: compute / fp16 hook", *(TORCH[n] for n in torch), "best PyTorch",
            "measured"]
    first = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    head = ["result", "model", "best PyTorch", *(OURS.get(n, n) for n in ours), "auto vs fp16 hook",
            "auto final (DDP best)", "auto's cold runs alike"]
    second = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    marked: dict[str, list[str]] = {}
    for r in records:
        rows, path = r["rows"], r["path"]
        best = best_torch(rows)
        best_s = None if best is None else best[1]
        name = f"[{path.stem}]({path.name})"
        steps = [rows.get(n, {}).get("median_ms") for n in (COMPUTE, "fp16")]
        step = " / ".join("-" if s is None else f"{s:.0f}" for s in steps)
        when = " ".join(r["meta"].get("date", "")[:16].split("T")) or "-"
        where = origin(path)
        when += f", {where.split()[0]}" if where else ""
        for text in notes_for([p.name for p in path.parent.glob(path.stem + ".*")], notes):
            marked.setdefault(text, []).append(path.stem)
            when += f" [{list(marked).index(text) + 1}]"
        cells = [name, r["link"], r["layout"], r["model"], r["batch"], step,
                 *(_cell(rows, n, None) for n in torch),
                 "none reached" if best is None else f"{_s(best[1])} ({TORCH[best[0]]})",
                 when]
        first.append("| " + " | ".join(cells) + " |")
        auto, fp16 = (rows.get(n, {}).get("target_s") for n in ("auto", "fp16"))
        final = ("-" if "auto" not in rows or "ddp" not in rows else
                 f"{rows['auto']['smoothed_final']:.4f} ({rows['ddp']['smoothed_best']:.4f})")
        rep = r["repeat"]
        cells = [name, r["model"], "-" if best is None else TORCH[best[0]],
                 *(_cell(rows, n, best_s) for n in ours),
                 "-" if auto is None or fp16 is None else f"{fp16 / auto:.2f}x", final,
                 "-" if rep is None else f"{rep['same']} of {rep['repeats']}"]
        second.append("| " + " | ".join(cells) + " |")
    out = ["## PyTorch's options", "", "Time to target of each; the best is the one that "
           "reached it first.", "", *first, "",
           "## Ours against the best PyTorch option", "",
           "Each of our runs: its time to target (the best PyTorch option's time over it; above "
           "1x: ours reached the target sooner).", "", *second]
    if marked:
        out += ["", "Notes (\"measured\": the date recorded in the result and the commit that "
                "brought it in):", ""]
        out += [f"{i}. {', '.join(dict.fromkeys(stems))}: {text}" for i, (text, stems) in
                enumerate(marked.items(), 1)]
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path,
                    help="a folder (writes its README.md from its tta_*.json) or JSON files")
    ap.add_argument("--note", action="append", default=[], metavar="GLOB[,GLOB...]=TEXT",
                    help="a note for the results whose files match a GLOB (repeatable)")
    args = ap.parse_args(argv)
    folder = args.paths[0] if len(args.paths) == 1 and args.paths[0].is_dir() else None
    paths = sorted(folder.glob("tta_*.json")) if folder else args.paths
    if not paths:
        raise SystemExit(f"no tta_*.json in {folder}")
    metas = [json.loads(p.read_text())["meta"] for p in paths]
    tolerance = ", ".join(sorted({f"{m.get('tolerance', 1.0):g}" for m in metas}))
    smooth = ", ".join(sorted({str(m.get("smooth", 1)) for m in metas}))
    text = ["# Time to accuracy (compcoll bench tta)", "",
            f"command: `python scripts/{shlex.join([Path(__file__).name, *argv])}`", "",
            "Every run of a result trains the same model from the same weights on the same "
            "batches; the clock is training wall-clock time, evaluation excluded. The target: "
            f"DDP's best quality less {tolerance} point(s) of accuracy, or plus {tolerance}% of "
            f"a loss, every curve smoothed over its last {smooth} evaluations (each result's "
            ".txt states its target). \"not reached\": the run never reached it; \"-\": not "
            "in that result. Best PyTorch: whichever of DDP without a hook and PyTorch's fp16, "
            "bf16, PowerSGD rank 1 and rank 4 hooks and post-local SGD reached the target "
            "first.", "",
            *tables(results(paths), parse_notes(args.note))]
    if folder:
        (folder / "README.md").write_text("\n".join(text) + "\n")
        print(f"wrote {folder / 'README.md'}")
    else:
        print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

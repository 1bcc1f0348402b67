"""``bench tta``'s outputs: the table, JSON (every curve) and a PNG of quality against time.

The table's ``final`` and ``best`` are of the smoothed curve (the one compared with the
target); the JSON keeps both curves (``curve`` raw, ``smoothed``) and both pairs of values.
"""

from __future__ import annotations

from typing import Any

from . import train_report

# Within ``benchlib.WIDTH`` columns; the JSON also has each run's time of its first 10 steps
# (``first10_s``) and its every step's time.
COLUMNS = [("model", "model", 8, "{}"), ("run", "run", 11, "{}"),
           ("target_s", "to target(s)", 12, "{:.2f}"), ("target_step", "at step", 7, "{}"),
           ("vs_fp16", "vs fp16", 7, "{:.2f}x"), ("vs_hooks", "vs torch", 8, "{:.2f}x"),
           ("smoothed_final", "final", 6, "{:.4f}"), ("smoothed_best", "best", 6, "{:.4f}"),
           ("mb_per_step", "MB/step", 7, "{:.3f}"),
           ("mean_ms", "mean(ms)", 8, "{:.1f}"), ("median_ms", "median(ms)", 10, "{:.1f}"),
           ("worst5_x", "worst5/med", 10, "{:.2f}x"), ("train_s", "train(s)", 8, "{:.2f}")]

#: The runs whose times to target the others are compared with: PyTorch's fp16 hook, and the
#: soonest of PyTorch's options: DDP itself, its compression hooks, post-local SGD.
BASELINE = "fp16"
TORCH_HOOKS = ("ddp", "fp16", "bf16", "powersgd1", "powersgd", "postlocal")

#: Legend labels of the plot.
LABELS = {"ddp": "DDP, no hook", "ddp-hook": "DDP's allreduce in PyTorch's Python hook",
          "fp16": "PyTorch fp16 hook", "bf16": "PyTorch bf16 hook",
          "powersgd1": "PyTorch PowerSGD rank 1", "powersgd": "PyTorch PowerSGD rank 4",
          "auto": "ours, auto policy",
          "auto-rerun": "ours, auto policy, measurements from the cache",
          "auto-flat": "ours, auto policy, flat (no reduction inside hosts first)",
          "fp16-ours": "ours, fp16 (two-level across hosts)",
          "int8+ef": "ours, 8-bit + EF", "int4+ef": "ours, 4-bit + EF",
          "topk+ef": "ours, top-k 1% + EF", "powersgd+ef": "ours, PowerSGD rank 4 + EF",
          "diloco": "ours, DiLoCo (auto)", "onebit": "ours, 1-bit Adam (auto)",
          "postlocal": "PyTorch post-local SGD"}


def header() -> str:
    return train_report.header(COLUMNS)


def _missing(key: str, row: dict[str, Any]) -> str:
    return "not reached" if key == "target_s" and row.get("target") is not None else "-"


def format_row(row: dict[str, Any]) -> str:
    """One table line; a run with a target that never reached it says so."""
    return train_report.format_row(row, COLUMNS, _missing)


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_fp16``: the fp16 hook's time to target over the run's (above 1: sooner);
    ``vs_hooks``: the same against the soonest of PyTorch's compression hooks that reached
    it. None where either did not reach the target."""
    base: dict[str, float] = {}
    hooks: dict[str, float] = {}
    for r in rows:
        t = r.get("target_s")
        if t and r["run"] == BASELINE:
            base[r["model"]] = t
        if t and r["run"] in TORCH_HOOKS:
            hooks[r["model"]] = min(t, hooks.get(r["model"], t))
    for r in rows:
        mine = r.get("target_s")
        for key, ref in (("vs_fp16", base), ("vs_hooks", hooks)):
            r[key] = ref[r["model"]] / mine if mine and r["model"] in ref else None


write_json = train_report.write_json


def plot(path: str, rows: list[dict[str, Any]], title: str) -> None:
    """Per model, every synchronised run's smoothed quality against training wall-clock time
    (lines; the raw evaluations as faint dots of the same colour), the target as a dashed
    horizontal line: the whole curves above, a zoom on the target below (the compute-only run
    trains each rank's own model and is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 8), squeeze=False)
    for col, model in enumerate(models):
        mine = [r for r in rows if r["model"] == model and r.get("target") is not None]
        for ax in axes[:, col]:
            for r in mine:
                _, seconds, quality = zip(*r["smoothed"], strict=True)
                line, = ax.plot(seconds, quality, label=LABELS.get(r["run"], r["run"]))
                _, seconds, quality = zip(*r["curve"], strict=True)
                ax.plot(seconds, quality, linestyle="none", marker=".", markersize=4,
                        alpha=0.4, color=line.get_color())
            if mine:
                ax.axhline(mine[0]["target"], color="black", linestyle="--", linewidth=1,
                           label="target")
                ax.set_ylabel(mine[0]["metric_name"].replace("_", " "))
            ax.set_xlabel("training wall-clock time (s, evaluation excluded)")
            ax.grid(alpha=0.3)
        axes[0, col].set_title(model)
        axes[0, col].legend(fontsize=8)
        if mine:
            axes[1, col].set_ylim(*_zoom(mine))
            axes[1, col].set_title(f"{model}, near the target")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _zoom(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Quality limits around the target: six times its distance to the reference's best
    (smoothed) on the worse side, three times on the better."""
    goal, higher = rows[0]["target"], rows[0]["higher_is_better"]
    reference = rows[0]["smoothed_best"]  # the reference run comes first
    gap = max(abs(reference - goal), 1e-6)
    return (goal - 6 * gap, reference + 3 * gap) if higher else (reference - 3 * gap,
                                                                 goal + 6 * gap)

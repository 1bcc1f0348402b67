"""``compcoll bench tta``: the target and time-to-target logic, and the command end to end at
tiny sizes (two ranks, a few steps)."""

from __future__ import annotations

import json

import pytest

from collectives.commands import tta_report
from collectives.commands.tta_target import best, first_reached, target
from tests.test_cli import compcoll, refused

#: (step, seconds, quality)
ACCURACY = [(0, 0.0, 0.10), (10, 2.0, 0.55), (20, 4.0, 0.81), (30, 6.5, 0.90), (40, 9.0, 0.89)]
LOSS = [(0, 0.0, 8.0), (10, 1.5, 4.0), (20, 3.0, 3.05), (30, 4.5, 3.01), (40, 6.0, 3.00)]


def test_accuracy_target_is_points_below_the_best() -> None:
    goal = target(best(ACCURACY, True), True, tolerance=1.0)
    assert goal.value == pytest.approx(0.89) and goal.reference == 0.90
    assert first_reached(ACCURACY, goal) == (30, 6.5, 0.90)
    assert first_reached(ACCURACY[:3], goal) is None  # 0.81 never reaches 0.89
    tight = target(0.90, True, tolerance=0.0)
    assert first_reached(ACCURACY, tight) == (30, 6.5, 0.90)  # equal counts as reached
    assert "1 point(s) below ddp's best (0.9000)" in goal.describe("ddp", "accuracy")
    assert target(0.13, True, 1.0).reached(0.12)  # 0.13 - 0.01 rounds above 0.12: still met


def test_loss_target_is_percent_above_the_best() -> None:
    goal = target(best(LOSS, False), False, tolerance=1.0)
    assert goal.value == pytest.approx(3.03) and goal.reference == 3.00
    assert first_reached(LOSS, goal) == (30, 4.5, 3.01)  # 3.05 is above 3.03: not yet
    worse = [(s, t, q + 0.1) for s, t, q in LOSS]
    assert first_reached(worse, goal) is None
    assert "1% above ddp's best (3.0000)" in goal.describe("ddp", "bits_per_byte")


def test_target_refuses_what_has_no_meaning() -> None:
    with pytest.raises(ValueError, match="empty curve"):
        best([], True)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        target(0.9, True, -1.0)


def test_ratios_and_table_say_not_reached() -> None:
    rows = [{"model": "m", "run": "ddp", "target": 0.89, "target_s": 9.0},
            {"model": "m", "run": "fp16", "target": 0.89, "target_s": 6.0},
            {"model": "m", "run": "powersgd", "target": 0.89, "target_s": 4.0},
            {"model": "m", "run": "int8+ef", "target": 0.89, "target_s": 3.0},
            {"model": "m", "run": "topk+ef", "target": 0.89, "target_s": None},
            {"model": "m", "run": "compute", "target": None, "target_s": None}]
    tta_report.add_ratios(rows)
    assert [r["vs_fp16"] for r in rows] == [pytest.approx(6 / 9), 1.0, 1.5, 2.0, None, None]
    assert rows[3]["vs_hooks"] == pytest.approx(4 / 3)  # against the soonest hook: PowerSGD
    assert "not reached" in tta_report.format_row(rows[4])
    assert "not reached" not in tta_report.format_row(rows[5])  # no target, nothing to reach


def test_bytes_per_step_of_pytorchs_hooks() -> None:
    from collectives.commands.train_models import WideMLP
    from collectives.commands.train_runs import payload_bytes

    model = WideMLP((64, 256, 10))  # 64x256 and 256x10 weights, two biases
    fp32 = 4 * (64 * 256 + 256 + 256 * 10 + 10)
    assert payload_bytes("ddp", model, None) == fp32
    assert payload_bytes("bf16", model, None) == payload_bytes("fp16", model, None) == fp32 / 2
    # PowerSGD sends P and Q, (n + m) r floats, for a weight where that is under half of its
    # n m: both here (10x256 at rank 4: 1064 of 2560); biases go whole.
    rank4 = 4 * ((256 + 64) * 4 + 256 + (10 + 256) * 4 + 10)
    rank1 = 4 * ((256 + 64) + 256 + (10 + 256) + 10)
    assert payload_bytes("powersgd", model, None) == rank4
    assert payload_bytes("powersgd1", model, None) == rank1


def test_bench_tta_refuses_runs_without_the_reference(capsys) -> None:
    assert "add ddp" in refused("bench", "tta", "-np", "2", "--runs", "fp16,auto",
                                capsys=capsys)
    assert "--eval-every 50 is more than --steps 20" in refused(
        "bench", "tta", "-np", "2", "--steps", "20", "--eval-every", "50", capsys=capsys)


def test_bench_tta_smoke(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    out = {ext: tmp_path / f"tta.{ext}" for ext in ("json", "png", "txt")}
    res = compcoll("bench", "tta", "-np", "2", "--steps", "12", "--eval-every", "4",
                   "--model", "mlp-wide", "--runs", "int8+ef,fp16,ddp,compute",
                   "--timeout", "60", "--json", str(out["json"]), "--plot", str(out["png"]),
                   "--txt", str(out["txt"]), "--stop-at-target", "--tolerance", "20",
                   timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    data = json.loads(out["json"].read_text())
    meta, rows = data["meta"], data["rows"]
    assert meta["command"][:4] == ["compcoll", "bench", "tta", "-np"] and meta["ranks"] == 2
    assert "ddp's best" in meta["targets"]["mlp-wide"]
    assert [r["run"] for r in rows] == ["ddp", "int8+ef", "fp16", "compute"]  # ddp first
    ddp, int8, fp16, compute = rows
    assert ddp["steps"] == 12  # the reference runs its budget: its best defines the target
    for r in (ddp, int8, fp16):
        steps = r["steps"]  # the others stop where they first reach the target
        assert r["ranks_agree"] and r["target"] == ddp["target"]
        assert steps == (12 if r is ddp else r["target_step"] or 12)
        assert [s for s, _, _ in r["curve"]] == list(range(0, steps + 1, 4))
        seconds = [t for _, t, _ in r["curve"]]
        assert seconds[0] == 0.0 and seconds == sorted(seconds)
        assert seconds[-1] == pytest.approx(r["train_s"])
        assert r["final"] == r["curve"][-1][2] and 0.0 <= r["final"] <= r["best"] <= 1.0
        assert r["mean_ms"] > 0 and r["median_ms"] > 0 and 0 < r["first10_s"] <= r["train_s"]
        assert len(r["step_times_ms"]) == len(r["losses"]) == steps
        assert r["metric_name"] == "accuracy" and r["final_loss"] > 0
    assert ddp["target"] == pytest.approx(ddp["best"] - 0.20)  # 20 points: reached early
    assert int8["steps"] < 12 and fp16["steps"] < 12
    assert ddp["target_s"] is not None  # DDP reaches its own best
    assert int8["bytes_per_step"] < ddp["bytes_per_step"] / 3 < fp16["bytes_per_step"]
    assert fp16["vs_fp16"] == 1.0 and compute["bytes_per_step"] == 0
    assert compute["target"] is None and compute["curve"] == [] and compute["steps"] == 12
    assert compute["median_ms"] > 0 and compute["ranks_agree"] is None  # each its own model
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = out["txt"].read_text()
    assert "target accuracy" in table and "compute" in table
    assert table.splitlines()[1].startswith("# command: compcoll bench tta ")
    assert "to target(s)" in res.stdout

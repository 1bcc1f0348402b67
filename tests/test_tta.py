"""``compcoll bench tta``: the target and time-to-target logic, and the command end to end at
tiny sizes (two ranks, a few steps)."""

from __future__ import annotations

import json
from collections import deque
from types import SimpleNamespace

import pytest

from compcoll_bench.commands import tta_report, tta_steps
from compcoll_bench.commands.tta_target import (
    best,
    first_reached,
    reference_target,
    smooth,
    smoothed,
    target,
)
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


def test_smoothing_is_a_trailing_mean_of_the_last_k() -> None:
    assert smoothed([1.0, 2.0, 3.0, 4.0, 8.0], 3) == [1.0, 1.5, 2.0, 3.0, 5.0]
    values = [0.1, 0.7, 0.3, 0.9]
    assert smoothed(values, 1) == values  # window 1: the raw values, bit for bit
    assert smoothed(values, 10) == pytest.approx([0.1, 0.4, 1.1 / 3, 0.5])
    assert smooth(LOSS[:3], 2) == [(0, 0.0, 8.0), (10, 1.5, 6.0), (20, 3.0, 3.525)]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="smoothing window must be an integer >= 1"):
            smoothed(values, bad)  # type: ignore[arg-type]


#: DDP's accuracy with one lucky evaluation (0.9865) well above where it settles (0.9596).
SPIKY = [(0, 0.0, 0.10), (10, 2.0, 0.93), (20, 4.0, 0.9596), (30, 6.0, 0.9865),
         (40, 8.0, 0.9596), (50, 10.0, 0.9630), (60, 12.0, 0.9596)]
#: A run as good as DDP without the luck: its best evaluation is 0.0002 short of the spike's
#: target.
STEADY = [(0, 0.0, 0.10), (10, 1.5, 0.94), (20, 3.0, 0.9630), (30, 4.5, 0.9663),
          (40, 6.0, 0.9697), (50, 7.5, 0.9663), (60, 9.0, 0.9630)]


def test_a_spike_in_the_reference_no_longer_sets_an_unreachable_target() -> None:
    raw = reference_target(SPIKY, True, tolerance=1.0, window=1)
    assert raw.value == pytest.approx(0.9765)  # the spike less 1 point
    assert first_reached(STEADY, raw) is None  # missed by 0.0068 though as good as DDP
    goal = reference_target(SPIKY, True, tolerance=1.0, window=3)
    assert goal.reference == pytest.approx((0.9865 + 0.9596 + 0.9630) / 3)  # at step 50
    assert goal.value == pytest.approx(goal.reference - 0.01)
    # Target 0.9597. STEADY smoothed: (0.94 + 0.963 + 0.9663) / 3 = 0.9564 at step 30 (not
    # yet), (0.963 + 0.9663 + 0.9697) / 3 = 0.9663 at step 40 (reached): that point's time.
    assert first_reached(STEADY, goal) == (40, 6.0, pytest.approx(0.9663, abs=1e-4))
    assert first_reached(SPIKY, goal) == (40, 8.0, pytest.approx(0.96857, abs=1e-5))
    assert "smoothed by the mean of its last 3 evaluations" in goal.describe("ddp", "accuracy")
    assert "smoothed" not in raw.describe("ddp", "accuracy")


def test_smoothed_loss_target_reached_and_missed() -> None:
    goal = reference_target(LOSS, False, tolerance=1.0, window=2)
    assert goal.reference == pytest.approx(3.005) and goal.value == pytest.approx(3.03505)
    # smoothed: 8, 6, 3.525, 3.03 (step 30: reached), 3.005
    assert first_reached(LOSS, goal) == (30, 4.5, pytest.approx(3.03))
    one_good_eval = [(0, 0.0, 8.0), (10, 1.5, 3.2), (20, 3.0, 3.0), (30, 4.5, 3.2)]
    assert first_reached(one_good_eval, goal) is None  # 3.0 once: mean 3.1 at best
    qualities = [q for _, _, q in LOSS]
    assert [goal.reached_last(qualities[:n]) for n in range(6)] == [
        False, False, False, False, True, True]  # what --stop-at-target asks after each


def test_smooth_1_is_the_raw_comparison() -> None:
    def raw_first(curve, value, higher):  # the comparison of unsmoothed qualities
        ok = [p for p in curve if (p[2] >= value - 1e-9 if higher else p[2] <= value + 1e-9)]
        return ok[0] if ok else None

    for curve, higher in ((ACCURACY, True), (LOSS, False), (SPIKY, True), (STEADY, True)):
        for tol in (0.0, 0.5, 1.0, 5.0, 30.0):
            goal = reference_target(curve, higher, tol, window=1)
            assert goal == target(best(curve, higher), higher, tol)
            others = (ACCURACY, SPIKY, STEADY) if higher else (LOSS,)
            for other in others:
                assert first_reached(other, goal) == raw_first(other, goal.value, higher)


def test_worst_stretch_of_five_steps_after_the_first() -> None:
    steps = [900.0, 12.0] + [10.0] * 10 + [30.0] + [10.0] * 10  # the first step: left out
    # The worst 5 in a row hold the 30 ms step: (30 + 4 * 10) / 5 = 14 ms, 1.4x the median.
    assert tta_steps.worst_stretch(steps, 10.0) == pytest.approx(1.4)
    assert tta_steps.worst_stretch([900.0] + [10.0] * 8 + [15.0] * 5, 10.0) == 1.5
    assert tta_steps.worst_stretch([900.0, 20.0, 10.0], 10.0) == 1.5  # fewer than 5: all
    assert tta_steps.worst_stretch([900.0], 10.0) is None
    assert tta_steps.worst_stretch([900.0, 10.0], 0.0) is None


def test_hook_time_and_step_split() -> None:
    def rec(step: int, start: float, launched: float) -> dict:
        return {"step": step, "bucket": 0, "start": start, "launched": launched}

    state = SimpleNamespace(timeline=deque(
        [rec(3, 0.0, 0.5), rec(4, 1.0, 1.25), rec(4, 2.0, 2.5)], maxlen=4096))
    assert tta_steps.hook_seconds(state, 4) == 0.75  # both of step 4's buckets
    assert tta_steps.hook_seconds(state, 5) == 0.0  # no hook call in step 5
    one_rank = SimpleNamespace(size=1, allreduce=lambda x: x)
    parts = [(1.0, 1.0, 1.0, 1.0)] * 2 + [(0.002, 0.010, 0.001, 0.004)] * 3
    split = tta_steps.split_ms(parts, 2, one_rank, with_hook=True)
    assert split == pytest.approx({"forward": 2.0, "backward": 10.0, "optimizer": 1.0,
                                   "hook": 4.0})
    assert "hook" not in tta_steps.split_ms(parts, 2, one_rank, with_hook=False)
    rows = [{"model": "m", "run": "int8+ef", "median_ms": 15.0, "split_ms": split},
            {"model": "m", "run": "compute", "median_ms": 5.0,
             "split_ms": {"forward": 2.0, "backward": 3.0, "optimizer": 1.0}},
            {"model": "n", "run": "ddp", "median_ms": 9.0,
             "split_ms": {"forward": 2.0, "backward": 5.0, "optimizer": 1.0}}]
    tta_steps.add_exposed(rows)
    assert rows[0]["split_ms"]["exposed_wait"] == pytest.approx(7.0)
    assert "exposed_wait" not in rows[1]["split_ms"]  # the floor itself
    assert "exposed_wait" not in rows[2]["split_ms"]  # no compute run for its model
    table = tta_steps.split_table(rows)
    assert table[0].startswith("# step split") and "exposed" in table[1]
    assert table[2].split() == ["m", "int8+ef", "15.0", "2.0", "10.0", "1.0", "4.0", "7.0"]
    assert table[4].split() == ["n", "ddp", "9.0", "2.0", "5.0", "1.0", "-", "-"]


def test_bits_per_byte_is_measured_on_many_held_out_windows(monkeypatch) -> None:
    from compcoll_bench.commands import train_models

    t = train_models.task("embed", 0)
    seen = []
    real = train_models.Task.loss
    monkeypatch.setattr(train_models.Task, "loss",
                        lambda self, model, batch: seen.append(batch[0].shape) or real(
                            self, model, batch))
    assert 0 < t.evaluate(t.make()) < 9  # bits per byte of an untrained model: about 8
    assert seen == [(train_models.EVAL_WINDOWS, train_models.CONTEXT)]
    assert train_models.EVAL_WINDOWS >= 128


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
    from compcoll_bench.commands.train_models import WideMLP
    from compcoll_bench.commands.train_runs import payload_bytes

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
                   "--smooth", "2", "--repeat-auto", "2", "--repeat-steps", "30",
                   timeout=240)
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
        assert [p[:2] for p in r["smoothed"]] == [p[:2] for p in r["curve"]]
        assert r["smoothed"][1][2] == pytest.approx((r["curve"][0][2] + r["curve"][1][2]) / 2)
        assert r["smoothed_final"] == r["smoothed"][-1][2] <= r["smoothed_best"] <= r["best"]
        assert (r["split_ms"].get("hook", 0) > 0) == (r is int8)  # our hook's time
        assert r["split_ms"]["exposed_wait"] == pytest.approx(
            r["split_ms"]["backward"] - compute["split_ms"]["backward"])
    for r in rows:
        assert all(r["split_ms"][k] > 0 for k in ("forward", "backward", "optimizer"))
        assert r["worst5_x"] > 0
    assert "exposed_wait" not in compute["split_ms"] and meta["smooth"] == 2
    assert ddp["target"] == pytest.approx(ddp["smoothed_best"] - 0.20)  # 20 points: early
    assert int8["steps"] < 12 and fp16["steps"] < 12
    assert ddp["target_s"] is not None  # DDP reaches its own best
    assert int8["bytes_per_step"] < ddp["bytes_per_step"] / 3 < fp16["bytes_per_step"]
    assert fp16["vs_fp16"] == 1.0 and compute["bytes_per_step"] == 0
    assert compute["target"] is None and compute["curve"] == [] and compute["steps"] == 12
    assert compute["median_ms"] > 0 and compute["ranks_agree"] is None  # each its own model
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = out["txt"].read_text()
    assert "target accuracy" in table and "compute" in table and "worst5/med" in table
    assert "smoothed by the mean of its last 2 evaluations" in table
    assert "# step split" in table and "# step split" in res.stdout
    assert table.splitlines()[1].startswith("# command: compcoll bench tta ")
    assert "to target(s)" in res.stdout
    # Two cold repeats of auto: each measured anew (its own empty cache), each decided.
    (rep,) = meta["repeat_auto"]
    assert rep["repeats"] == 2 and len(rep["runs"]) == 2 and rep["ranks_agree"] is True
    assert rep["model"] == "mlp-wide" and 1 <= rep["same"] <= 2 and rep["distinct"] <= 2
    assert all(set(r) >= {"net.1.weight", "net.3.weight"} for r in rep["runs"])
    assert "cold runs of 30 steps" in table


def test_bench_tta_runs_the_optimizers_beside_ddp(tmp_path) -> None:
    """diloco and onebit (ours) and postlocal (PyTorch's post-local SGD) replace the
    optimizer, on the plain model or DDP with its post-local hook: each trains its own step
    budget (--budget 2x), reports its bytes, and the ranks' weights agree where they must
    (1-bit Adam: every step). DiLoCo at its defaults may sync every step in float32 where
    the link is fast (its exchange hidden behind the next step): never more bytes than DDP."""
    out = tmp_path / "tta.json"
    res = compcoll("bench", "tta", "-np", "2", "--steps", "30", "--eval-every", "10",
                   "--model", "cnn", "--runs", "ddp,postlocal,diloco,diloco-int8,onebit",
                   "--budget", "2x", "--timeout", "120", "--json", str(out), timeout=400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    rows = {r["run"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["ddp", "postlocal", "diloco", "diloco-int8", "onebit"]
    assert rows["ddp"]["steps"] == 30
    for name in ("postlocal", "diloco", "diloco-int8", "onebit"):
        r = rows[name]
        assert r["steps"] == 60 and 0.0 <= r["final"] <= 1.0, r
        assert 0 < r["bytes_per_step"] <= rows["ddp"]["bytes_per_step"], name
        if name != "diloco":
            assert r["bytes_per_step"] < rows["ddp"]["bytes_per_step"], name
    assert rows["onebit"]["ranks_agree"] is True
    assert rows["diloco"]["ranks_agree"] is None and rows["postlocal"]["ranks_agree"] is None

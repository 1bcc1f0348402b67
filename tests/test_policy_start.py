"""The automatic policy's start: profiling work bounded per step, and this machine's codec
speeds kept for any model."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from collectives.policy import AutoPolicy, Layer, machine, profile
from collectives.policy.probing import schedule
from collectives.policy.tunables import Tunables
from tests.test_policy import SteadyClock
from tests.test_policy_cache import Ranks, decided, drive, model, policy

BUDGET = 600_000  # elements a step, and 150_000 sampled ones (two layers' samples)


def spied(monkeypatch) -> list[tuple[int, str, int]]:
    """(step, layer, elements) of every gradient the profiler is handed."""
    seen: list[tuple[int, str, int]] = []
    real = profile.Profiler.observe

    def spy(self, step, layer, grad, bucket=None):
        seen.append((step, layer.name, layer.numel))
        real(self, step, layer, grad, bucket)

    monkeypatch.setattr(profile.Profiler, "observe", spy)
    return seen


def test_each_profiling_step_observes_at_most_its_budget(tmp_path, monkeypatch) -> None:
    """Seven weights of 16K-1M elements over five buckets: the steps spread them, a bucket
    stays whole where it fits, and a layer larger than the budget is profiled alone."""
    monkeypatch.setattr(profile, "time", SteadyClock())
    tunables = Tunables(sample=1 << 16)  # samples of 64K: the groups below
    sizes = [(65536, 65536), (131072,), (1 << 20,), (262144, 16384), (65536,)]
    buckets = [[Layer(f"b{b}.w{i}", n, (n // 64, 64), "linear") for i, n in enumerate(ns)]
               for b, ns in enumerate(sizes)]
    seen = spied(monkeypatch)
    pol = policy(tmp_path, cache=False, profile_elements_per_step=BUDGET, tunables=tunables)
    drive(pol, Ranks(), range(14), buckets)
    per_step: dict[int, list[tuple[str, int]]] = {}
    for step, name, n in seen:
        per_step.setdefault(step, []).append((name, n))
    for step, layers in per_step.items():
        sampled = sum(min(n, tunables.sample) for _, n in layers)
        assert len(layers) == 1 or (sum(n for _, n in layers) <= BUDGET
                                    and 4 * sampled <= BUDGET), (step, layers)
    groups = [sorted({name for name, _ in per_step[s]}) for s in sorted(per_step)][::2]
    assert groups == [["b0.w0", "b0.w1"], ["b1.w0"], ["b2.w0"],
                      ["b3.w0", "b3.w1", "b4.w0"]], groups
    assert {name for _, name, _ in seen} == {x.name for b in buckets for x in b}
    assert decided(pol)[0] == (9, "decided (measured)")  # four groups of two probe steps


def test_the_schedule_keeps_buckets_whole_where_they_fit() -> None:
    ten = Tunables(sample=10)  # a sample codes at most 10 elements
    numel = {"a": 60, "b": 60, "c": 50, "d": 200, "e": 10, "f": 30}
    assert schedule([["a", "b"], ["c"], ["d", "e"], ["f"]], numel, 100, ten) == \
        [["a"], ["b"], ["c"], ["d"], ["e", "f"]]
    assert schedule([["a", "e"], ["c"]], numel, 1 << 30, ten) == [["a", "e", "c"]]
    # The sampled elements bound it too: three samples of 10, coded, cost 4 * 30 > 100.
    assert schedule([["a"], ["c", "e"], ["f"]], numel, 100, ten) == [["a"], ["c", "e"], ["f"]]
    assert schedule([["a"], ["c", "e"], ["f"]], numel, 120, ten) == [["a", "c", "e"], ["f"]]


def test_the_line_through_codec_times() -> None:
    sizes = np.array([1e4, 1e5, 1e6])
    call, each = machine.line(sizes, 5e-6 + 2e-9 * sizes)
    assert call == pytest.approx(5e-6) and each == pytest.approx(2e-9)
    assert machine.line(np.array([1e4]), np.array([2e-5])) == pytest.approx([0.0, 2e-9])
    assert machine.seconds([1e-6, 1e-9, 2e-6, 3e-9], 1000) == pytest.approx((2e-6, 5e-6))


def machine_file(tmp_path):
    (found,) = (tmp_path / "machine").glob("*.json")
    return found


def test_codec_speeds_are_kept_per_machine_and_price_a_new_model(tmp_path, monkeypatch) -> None:
    """A first model's profile times the codecs and leaves their speeds in the machine's
    file; another model on this machine (its own cache empty) prices its dense codecs from
    them instead of timing them. Sparse ones (top-k: its cost follows the data) are timed."""
    monkeypatch.setattr(profile, "time", SteadyClock())
    first = policy(tmp_path)
    drive(first, Ranks(), range(6), model())
    found = machine_file(tmp_path)
    assert found.name == f"{machine.key()}.json" and len(list(tmp_path.glob("*.json"))) == 1
    speeds = json.loads(found.read_text())["speeds"]
    cands = first.config.candidates
    dense = {c for c in cands if not c.startswith("topk")}
    assert set(speeds) == dense  # every dense candidate timed; top-k never kept
    other = [[Layer("enc.weight", 512 * 64, (512, 64), "linear")]]  # another model
    seen = spied(monkeypatch)
    second = policy(tmp_path)
    assert drive(second, Ranks(), range(6), other) == [1, 2] and not second.cached
    assert second._probing.speeds == speeds and seen
    cols = second.measurements["enc.weight"][1:].reshape(len(cands), profile.PER_CANDIDATE)
    for c, spec in enumerate(cands):
        want = machine.seconds(speeds[spec], 512 * 64) if spec in dense else (1e-5, 1e-5)
        if spec == "none":  # (capped at any other's: ``plain_first``)
            want = tuple(min(w, cols[:, j].min()) for j, w in zip((2, 3), want, strict=True))
        assert tuple(cols[c, 2:4]) == pytest.approx(want), spec  # the clock's 10 us a read


@pytest.mark.parametrize("how", ["garbage", "foreign", "negative", "strings", "short",
                                 "deep", "directory"])
def test_a_hostile_machine_file_is_ignored_with_a_warning_naming_it(tmp_path, monkeypatch,
                                                                     how) -> None:
    monkeypatch.setattr(profile, "time", SteadyClock())
    drive(policy(tmp_path), Ranks(), range(6), model())
    found = machine_file(tmp_path)
    record = json.loads(found.read_text())
    spec = next(iter(record["speeds"]))
    if how == "garbage":
        found.write_bytes(b"\x00{not json")
    elif how == "deep":
        found.write_bytes(b"[" * 10_000)
    elif how == "directory":
        found.unlink()
        found.mkdir()
    else:
        if how == "foreign":
            record["key"] = "0" * 64
        elif how == "negative":
            record["speeds"][spec][1] = -1e-9
        elif how == "strings":
            record["speeds"][spec] = [str(x) for x in record["speeds"][spec]]
        else:
            record["speeds"][spec] = record["speeds"][spec][:2]
        found.write_text(json.dumps(record))
    other = [[Layer("enc.weight", 512 * 64, (512, 64), "linear")]]
    pol = policy(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert drive(pol, Ranks(), range(6), other) == [1, 2]  # profiled, codecs timed
    said = [str(w.message) for w in caught]
    assert any(str(found) in s and "ignored" in s for s in said), said
    assert pol._probing.speeds == {} and decided(pol)[0] == (3, "decided (measured)")
    if how != "directory":  # rewritten from this profile's timings, valid again
        assert set(machine.check(json.loads(found.read_text()))) >= {"none", "fp16"}


def test_no_machine_file_without_the_cache(tmp_path) -> None:
    drive(policy(tmp_path, cache=False), Ranks(), range(6), model())
    assert not list(tmp_path.iterdir())
    assert AutoPolicy().config.profile_elements_per_step == 1 << 22
    with pytest.raises(ValueError, match="profile_elements_per_step"):
        AutoPolicy(profile_elements_per_step=0)

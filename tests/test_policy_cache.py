"""The automatic policy measures once: its cache on disk, and decisions without profiling."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from collectives import files
from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, Layer, auto, cache, profile
from collectives.policy.decide import weights
from collectives.policy.tunables import Tunables
from collectives.transport import CommCache
from tests.mpirun import run
from tests.test_mpi import _passed

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)  # ~1 Gbit/s: compression pays
LATENCY = 1e-3  # every candidate's collective: nothing measured on this machine


class Ranks:
    """Ranks that measured the same (rank 0 of ``size``): what the policy's allgathers see."""

    engine = "mpi"

    def __init__(self, size: int = 4) -> None:
        self.size, self.rank, self.cache = size, 0, CommCache(cost_params=SLOW)

    def allgather_ints(self, values, collective="", timeout=None):
        return np.tile(np.asarray(values).reshape(1, -1), (self.size, 1))


def model(width: int = 1024) -> list[list[Layer]]:
    """Three DDP buckets: two large weights, a small one, biases."""
    return [[Layer("fc1.weight", width * 128, (width, 128), "linear"),
             Layer("fc1.bias", width, (width,), "1d")],
            [Layer("fc2.weight", 128 * 128, (128, 128), "linear"),
             Layer("fc2.bias", 128, (128,), "1d")],
            [Layer("head.weight", 10 * 128, (10, 128), "linear")]]


def policy(tmp_path, **kw) -> AutoPolicy:
    options = {"first": 1, "probe_steps": 2, "every": 4, "window": 2, "max_error": 0.3,
               "cost": SLOW, "latency": LATENCY, "cache_dir": str(tmp_path),
               "profile_elements_per_step": 1, **kw}  # each bucket its own steps
    return AutoPolicy(**options)


def drive(pol: AutoPolicy, comm: Ranks, steps: range, buckets: list[list[Layer]],
          dtype: str = "torch.float32") -> list[int]:
    """What the DDP hook does, step by step; returns the steps that profiled."""
    rng = np.random.default_rng(0)
    profiled = []
    for step in steps:
        pol.update(comm, step)
        for b, layers in enumerate(buckets):
            pol.see_bucket(b, layers, [dtype] * len(layers))
            for lay in layers:
                if pol.wants_profile(step, lay.name):
                    profiled.append(step)
                    pol.observe(step, lay, rng.standard_normal(lay.numel), b)
            pol.observe_norm(step, float(b + 1), b)
    return sorted(set(profiled))


def decided(pol: AutoPolicy) -> list[tuple[int, str]]:
    return [(e["step"], e["event"]) for e in pol.log if e["event"].startswith("decided")]


@pytest.mark.parametrize("per_step", [1 << 20, 1 << 16])
def test_buckets_are_profiled_together_within_a_budget_and_small_layers_never(
        tmp_path, monkeypatch, per_step) -> None:
    """Whole buckets are profiled in the same steps while their elements fit
    ``profile_elements_per_step``; past it, one group of buckets after another."""
    pol = policy(tmp_path, cache=False, profile_elements_per_step=per_step)
    seen: list[tuple[int, str]] = []
    real = profile.Profiler.observe

    def spy(self, step, layer, grad, bucket=None):
        seen.append((step, layer.name))
        real(self, step, layer, grad, bucket)

    monkeypatch.setattr(profile.Profiler, "observe", spy)
    drive(pol, Ranks(), range(8), model())
    # The biases and the head (under 16384 elements) never.
    if per_step == 1 << 20:  # both buckets at steps 1-2
        assert seen == [(1, "fc1.weight"), (1, "fc2.weight"), (2, "fc1.weight"),
                        (2, "fc2.weight")], seen
        assert decided(pol)[0] == (3, "decided (measured)")
    else:  # a bucket at a time (fc1 alone is over the bound): fc1 at steps 1-2, fc2 at 3-4
        assert seen == [(1, "fc1.weight"), (2, "fc1.weight"), (3, "fc2.weight"),
                        (4, "fc2.weight")], seen
        assert decided(pol)[0] == (5, "decided (measured)")
    assert pol.decisions["head.weight"] == "none"  # a bucket of small layers only
    assert pol.decisions["fc1.weight"] != "none"  # 1 Gbit/s: a 512 KiB layer pays
    assert all(pol.decisions[n] == "none" for n in ("fc1.bias", "fc2.bias"))
    for bucket in model()[:2]:
        # A bias rides in its bucket's 16-bit group; never beside top-k or low rank, nor in
        # a quantizer's group under Adam (its error there is not measured): then in fp16.
        spec = pol.decisions[bucket[0].name]
        ride = spec if spec.startswith(("fp16", "bf16", "none")) else "fp16"
        assert pol.choose_bucket(bucket) == [spec, ride]


def test_until_the_first_decision_large_layers_send_fp16_and_small_ones_ride_with_them() -> None:
    pol = AutoPolicy()
    assert pol.choose(Layer("w", 1 << 20, (1024, 1024), "linear")) == "fp16"
    assert pol.choose(Layer("b", 100, (100,), "1d")) == "none"
    assert "use fp16, smaller ones ride with them" in pol.table()
    with pytest.raises(ValueError, match="initial 'uniform:bits=2"):
        AutoPolicy(initial="uniform:bits=2")


def test_a_second_run_reads_the_cache_and_decides_alike_without_profiling(
        tmp_path, monkeypatch) -> None:
    first = policy(tmp_path)
    assert drive(first, Ranks(), range(6), model()) == [1, 2, 3, 4]
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))

    def forbidden(*args, **kw):
        raise AssertionError("profiled or measured although the cache holds the numbers")

    monkeypatch.setattr(profile.Profiler, "observe", forbidden)
    monkeypatch.setattr(auto.latencies, "one_round", forbidden)
    second = policy(tmp_path)
    assert drive(second, Ranks(), range(6), model()) == []
    assert decided(second)[0] == (1, "decided (first, from the cache)")
    assert second.cached and second.measurements.keys() == first.measurements.keys()
    assert second.decisions == first.decisions
    for name, row in first.measurements.items():
        np.testing.assert_array_equal(second.measurements[name], row)


def test_the_cache_keeps_the_measured_latencies(tmp_path, monkeypatch) -> None:
    calls = []

    def one_round(comm, cands, plain, step, **kw):
        calls.append(step)
        return 1e-3 * np.arange(1, len(cands) + 1)

    monkeypatch.setattr(auto.latencies, "one_round", one_round)
    runs = [policy(tmp_path, latency=None) for _ in range(2)]
    for pol in runs:
        drive(pol, Ranks(), range(6), model())
    assert calls == list(range(Tunables().latency_repeats + 1))  # the first run's rounds only
    assert runs[1].measured == runs[0].measured is not None
    assert runs[1].decisions == runs[0].decisions
    assert runs[1].collective_s == runs[0].collective_s


def test_latencies_measured_after_a_cache_hit_are_added_to_it(tmp_path, monkeypatch) -> None:
    calls = []

    def one_round(comm, cands, plain, step, **kw):
        calls.append(step)
        return np.full(len(cands), 2e-3)

    monkeypatch.setattr(auto.latencies, "one_round", one_round)
    drive(policy(tmp_path), Ranks(), range(6), model())  # latencies given: none measured
    for _ in range(2):
        pol = policy(tmp_path, latency=None)
        assert drive(pol, Ranks(), range(6), model()) == [] and pol.cached
    assert len(calls) == Tunables().latency_repeats + 1  # the third run read them
    assert pol.measured is not None


def test_latency_rounds_are_spread_over_the_profiling_steps(tmp_path, monkeypatch) -> None:
    """One round of timed collectives per profiling step (steps 1-4 profile the two
    buckets), the rest at the decision (step 5): no step pays for all of them."""
    steps: list[int] = []
    pol = policy(tmp_path, latency=None, cache=False)
    now = {"step": -1}
    real_update = pol.update

    def update(comm, step, **kw):
        now["step"] = step
        return real_update(comm, step, **kw)

    def one_round(comm, cands, plain, step, **kw):
        steps.append(now["step"])
        return np.full(len(cands), 1e-3)

    monkeypatch.setattr(pol, "update", update)
    monkeypatch.setattr(auto.latencies, "one_round", one_round)
    drive(pol, Ranks(), range(6), model())
    assert steps == [1, 2, 3, 4, 5, 5], steps
    assert pol.measured is not None and decided(pol)[0] == (5, "decided (measured)")


def test_the_cache_keeps_the_fitted_cost_model(tmp_path) -> None:
    """A second fit of the same link differs (busy cores): the first one's prices are used,
    so the decisions cannot flip between runs."""
    first = policy(tmp_path, cost=None)
    drive(first, Ranks(), range(6), model())
    again = Ranks()
    again.cache.cost_params = CostParams(alpha=6e-5, beta=1.1e-8, gamma=1e-10)  # the same decade
    second = policy(tmp_path, cost=None)
    assert drive(second, again, range(6), model()) == []
    assert second.cached and second.fitted == first.fitted == SLOW
    assert second.decisions == first.decisions and second.rows == first.rows


def test_the_cache_keeps_the_link_classes_and_hosts_of_a_fit(tmp_path) -> None:
    """A fit on hosts of several ranks (link classes inside and across hosts) comes back
    whole, so a second run prices the two-level calls alike."""
    from collectives.costparams import Link

    hosts = CostParams.of_hosts(Link(2e-6, 1e-10), Link(5e-5, 8e-9), 1e-10, (2, 2))
    comm = Ranks()
    comm.cache.cost_params = hosts
    first = policy(tmp_path, cost=None)
    drive(first, comm, range(6), model())
    again = Ranks()
    again.cache.cost_params = CostParams.of_hosts(Link(3e-6, 1.2e-10), Link(6e-5, 1.1e-8),
                                                  1e-10, (2, 2))
    second = policy(tmp_path, cost=None)
    assert drive(second, again, range(6), model()) == []
    assert second.cached and second.fitted == first.fitted == hosts
    assert second.decisions == first.decisions


@pytest.mark.parametrize("change", ["shape", "dtype", "name", "world", "link", "candidates"])
def test_the_cache_is_not_used_for_another_layout_world_size_or_link(tmp_path, change) -> None:
    drive(policy(tmp_path), Ranks(), range(6), model())
    buckets, comm, dtype, kw = model(), Ranks(), "torch.float32", {}
    if change == "shape":
        buckets = model(width=512)
    elif change == "dtype":
        dtype = "torch.bfloat16"
    elif change == "name":
        buckets[1][0] = Layer("fc3.weight", 128 * 128, (128, 128), "linear")
    elif change == "world":
        comm = Ranks(size=3)
    elif change == "link":
        comm.cache.cost_params = CostParams(alpha=5e-6, beta=8e-11, gamma=1e-10)  # 100 Gbit/s
    else:
        kw = {"candidates": ("none", "fp16")}
    pol = policy(tmp_path, **kw)
    assert drive(pol, comm, range(6), buckets, dtype) == [1, 2, 3, 4]  # measured again
    assert not pol.cached and len(list(tmp_path.glob("*.json"))) == 2


def test_key_is_stable_and_names_what_it_depends_on() -> None:
    layout = [[0, "w", [4, 4], "torch.float32"]]
    k = cache.key(layout, 4, "mpi", ("none", "fp16"), 16384)
    assert k == cache.key([list(x) for x in layout], 4, "mpi", ("none", "fp16"), 16384)
    others = [cache.key([[1, "w", [4, 4], "torch.float32"]], 4, "mpi", ("none", "fp16"), 16384),
              cache.key(layout, 2, "mpi", ("none", "fp16"), 16384),
              cache.key(layout, 4, "gloo", ("none", "fp16"), 16384),
              cache.key(layout, 4, "mpi", ("none",), 16384),
              cache.key(layout, 4, "mpi", ("none", "fp16"), 0)]
    assert len({k, *others}) == 6


def _corrupt(path, how: str) -> None:
    record = json.loads(path.read_text())
    name = next(iter(record["table"]))
    width = len(record["table"][name])
    raw = {"garbage": b"\x00not json{", "truncated": path.read_bytes()[:40],
           "empty": b"", "deep": b"[" * 100_000, "deep object": b'{"a":' * 100_000,
           "not utf-8": b'{"schema": "\xff\xfe"}'}
    if how in raw:
        path.write_bytes(raw[how])
        return
    if how == "padded":  # valid JSON, but larger than such a file can be
        path.write_bytes(path.read_bytes() + b" " * files.LIMIT)
        return
    if how == "fifo":  # a reader that opened it would wait for a writer forever
        path.unlink()
        os.mkfifo(path)
        return
    if how == "directory":
        path.unlink()
        path.mkdir()
        return
    rows = {"ones": [1.0] * width, "true": [True] * width, "zeros": [0.0] * width}
    if how in rows:  # every layer alike
        record["table"] = {k: rows[how] for k in record["table"]}
    elif how == "strings":  # every number as its text
        record["table"] = {k: [repr(x) for x in v] for k, v in record["table"].items()}
    if how == "foreign":
        record["key"] = "0" * 64
    elif how == "schema":
        record["schema"] = 99
    elif how == "negative":
        record["table"][name][3] = -1.0
    elif how == "infinite":
        record["table"][name][3] = float("inf")
    elif how == "short row":
        record["table"][name] = record["table"][name][:-1]
    elif how == "unknown layer":
        record["table"]["ghost.weight"] = record["table"][name]
    elif how == "kept":
        record["table"][name][6] = 1e12  # keeps more elements than the layer has
    elif how == "fit":
        record["fit"] = {"alpha": -1.0, "beta": 1e-9, "gamma": 0.0}
    elif how == "huge int":
        record["table"][name][3] = int("9" * 400)
    elif how == "huge fit":
        record["fit"] = {"alpha": int("9" * 400), "beta": 1e-9, "gamma": 0.0}
    elif how == "fit overflows":  # finite, but a price of it is not
        record["fit"] = {"alpha": 5e-5, "beta": 1e300, "gamma": 1e-10}
    elif how == "fit hosts":  # hosts that do not add up to the world
        record["fit"] = {"alpha": 5e-5, "beta": 8e-9, "gamma": 1e-10, "hosts": [3]}
    elif how == "fit class":
        record["fit"] = {"alpha": 5e-5, "beta": 8e-9, "gamma": 1e-10, "intra": [1e-6]}
    elif how == "fit as strings":
        record["fit"] = {"alpha": "5e-5", "beta": "8e-9", "gamma": "1e-10"}
    elif how == "latency as strings":
        cands = record["candidates"]
        record["measured"] = {"ranks": 4, "seconds": {c: "0.001" for c in cands},
                              "overhead_s": {c: "0" for c in cands}}
    elif how == "world as float":
        cands = record["candidates"]
        record["measured"] = {"ranks": 4.0, "seconds": {c: 1e-3 for c in cands},
                              "overhead_s": {c: 0.0 for c in cands}}
    elif how == "schema as float":
        record["schema"] = float(record["schema"])
    elif how == "latency":
        record["measured"] = {"ranks": 4, "seconds": {"none": 1.0}, "overhead_s": {}}
    path.write_text(json.dumps(record))


CORRUPT = ["garbage", "truncated", "foreign", "schema", "negative", "infinite", "short row",
           "unknown layer", "kept", "fit", "latency", "empty", "deep", "deep object",
           "not utf-8", "padded", "fifo", "directory", "ones", "true", "zeros", "strings",
           "huge int", "huge fit", "fit overflows", "fit hosts", "fit class", "fit as strings",
           "latency as strings",
           "world as float", "schema as float"]


@pytest.mark.timeout(60)  # a reader blocked on a FIFO fails the test rather than hangs it
@pytest.mark.parametrize("how", CORRUPT)
def test_a_corrupt_cache_file_is_ignored_with_a_warning(tmp_path, how) -> None:
    drive(policy(tmp_path), Ranks(), range(6), model())
    (path,) = tmp_path.glob("*.json")
    _corrupt(path, how)
    pol = policy(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert drive(pol, Ranks(), range(6), model()) == [1, 2, 3, 4]  # measured again
    said = [str(w.message) for w in caught]
    assert any(str(path) in s and "ignored" in s for s in said), said
    assert not pol.cached and decided(pol)[0] == (5, "decided (measured)")
    if how == "directory":  # nothing can be renamed over it
        assert any(str(path) in s and "not written" in s for s in said), said
        return
    assert json.loads(path.read_text())["schema"] == cache.SCHEMA  # rewritten, valid again


def test_the_cache_can_be_switched_off(tmp_path) -> None:
    drive(policy(tmp_path, cache=False), Ranks(), range(6), model())
    assert not list(tmp_path.iterdir())


def _reuse_warnings(caught, path) -> list[str]:
    return [str(w.message) for w in caught
            if "earlier run" in str(w.message) and str(path) in str(w.message)]


def test_a_run_deciding_from_the_cache_says_so_once_naming_the_file(
        tmp_path, monkeypatch) -> None:
    """Reused measurements are announced as a warning (rank 0; not only at INFO), naming the
    file and the switch that ignores it, once per file and process."""
    monkeypatch.delenv(cache.SWITCH, raising=False)
    monkeypatch.setattr(cache, "_told", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drive(policy(tmp_path), Ranks(), range(6), model())
        (path,) = tmp_path.glob("*.json")
        assert not _reuse_warnings(caught, path)  # measured, not reused
        for _ in range(2):  # two more runs in this process: said once
            pol = policy(tmp_path)
            assert drive(pol, Ranks(), range(6), model()) == [] and pol.cached
    said = _reuse_warnings(caught, path)
    assert len(said) == 1, said
    assert f"{cache.SWITCH}=off" in said[0] and "cache=False" in said[0]


@pytest.mark.parametrize("value", ["off", "0", "False", " no "])
def test_the_environment_switch_ignores_the_cache(tmp_path, monkeypatch, value) -> None:
    """COMPCOLL_POLICY_CACHE=off: the run measures again, and leaves the file as it was."""
    monkeypatch.setattr(cache, "_told", set())
    drive(policy(tmp_path), Ranks(), range(6), model())
    (path,) = tmp_path.glob("*.json")
    before = path.read_bytes()
    monkeypatch.setenv(cache.SWITCH, value)
    pol = policy(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert drive(pol, Ranks(), range(6), model()) == [1, 2, 3, 4]  # measured again
    assert not pol.cached and decided(pol)[0] == (5, "decided (measured)")
    assert not _reuse_warnings(caught, path)
    assert path.read_bytes() == before  # neither read nor written
    fresh = tmp_path / "fresh"
    drive(policy(fresh), Ranks(), range(6), model())
    assert not list(fresh.glob("*.json"))  # (only this machine's codec speeds, in machine/)


@pytest.mark.parametrize("value", ["", "1", "on", "YES"])
def test_the_switch_on_or_unset_uses_the_cache(monkeypatch, value) -> None:
    monkeypatch.setenv(cache.SWITCH, value)
    assert not cache.switched_off()
    monkeypatch.delenv(cache.SWITCH)
    assert not cache.switched_off()


def test_a_bad_switch_value_is_refused_naming_what_works(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(cache.SWITCH, "sometimes")
    with pytest.raises(ValueError, match=r"COMPCOLL_POLICY_CACHE='sometimes'.*off \(or 0\)"):
        drive(policy(tmp_path), Ranks(), range(6), model())


def test_deciding_again_never_profiles_or_measures(tmp_path, monkeypatch) -> None:
    pol = policy(tmp_path, cache=False, every=3)
    drive(pol, Ranks(), range(6), model())
    assert decided(pol) == [(5, "decided (measured)")]

    def forbidden(*args, **kw):
        raise AssertionError("a later decision profiled or timed collectives")

    monkeypatch.setattr(profile.Profiler, "observe", forbidden)
    monkeypatch.setattr(auto.latencies, "one_round", forbidden)
    comm, buckets = Ranks(), model()
    for step in range(6, 40):  # due every 3 steps; the shares move at 12, the norm at 20
        pol.update(comm, step)
        assert not pol.wants_profile(step)
        for b, layers in enumerate(buckets):
            pol.see_bucket(b, layers, ["torch.float32"] * len(layers))
            scale = (1.0 if step < 20 else 50.0) * (b + 1 if step < 12 else 3 - b)
            pol.observe_norm(step, scale, b)
    events = [e for _, e in decided(pol)]
    assert "decided (regime change)" in events and "decided (every 3)" in events, events
    assert any(e["event"].startswith("kept") for e in pol.log)  # nothing moved: no work
    assert set(pol.decisions) == {lay.name for layers in buckets for lay in layers}


def test_live_bucket_norms_move_the_error_weights() -> None:
    norms = np.array([3.0, 1.0, 4.0])  # layers 0 and 1 in bucket "a", layer 2 in "b"
    w = weights(norms, ["a", "a", "b"], {})
    np.testing.assert_allclose(w, norms / 8)
    moved = weights(norms, ["a", "a", "b"], {"a": 3.0, "b": 1.0})
    np.testing.assert_allclose(moved, [0.5625, 0.1875, 0.25])  # a: 3/4, split as profiled
    half = weights(norms, ["a", "a", "b"], {"b": 2.0})  # only b seen live: nothing moves
    np.testing.assert_allclose(half, w)


@pytest.mark.mpi
def test_two_runs_on_two_ranks_decide_alike_from_the_cache(tmp_path) -> None:
    for phase in ("first", "second"):
        out = run("policy_cache.py", 2, phase, str(tmp_path), timeout=150)
        _passed(out, "policy cache")


def test_a_large_layer_is_profiled_on_a_sample_scaled_to_its_size(monkeypatch) -> None:
    """Every 4th row of a 1024 x 1024 layer: bytes, kept elements and relative errors as the
    whole layer's."""
    layer = Layer("w", 1 << 20, (1024, 1024), "linear")
    rng = np.random.default_rng(3)
    low = rng.standard_normal((1024, 2)) @ rng.standard_normal((2, 1024))  # low rank + noise
    grad = (low + 0.3 * rng.standard_normal(layer.shape)).astype(np.float32)
    grad *= np.linspace(0.1, 2.0, 1024, dtype=np.float32)  # columns of different scales
    part = profile.sample(grad, size=1 << 18)
    assert part.shape == (256, 1024) and np.array_equal(part, profile.sample(grad, size=1 << 18))
    assert not np.array_equal(part, grad[::4])  # random rows, not strided
    cands = AutoPolicy().config.candidates

    def rows(sample_size: int) -> np.ndarray:
        prof = profile.Profiler(cands, tunables=Tunables(sample=sample_size))
        prof.observe(0, layer, grad)
        return prof.table()[1][0, 1:].reshape(len(cands), profile.PER_CANDIDATE)

    whole, sampled = rows(1 << 21), rows(1 << 18)
    np.testing.assert_allclose(sampled[:, 4], whole[:, 4], rtol=0.02)  # bytes
    np.testing.assert_allclose(sampled[:, 5], whole[:, 5], rtol=0.02)  # kept elements
    rel = np.sqrt(sampled[:, 0] / sampled[:, 1]), np.sqrt(whole[:, 0] / whole[:, 1])
    np.testing.assert_allclose(rel[0][1:], rel[1][1:], rtol=0.1)  # "none": 0 either way


def test_a_hashed_embedding_is_not_aliased_by_the_sample(monkeypatch) -> None:
    """A table indexed by a multiplicative hash: the common tokens land on rows that a
    strided sample (every 16th row) happens to hit, a few rows that rank 4 fits exactly.
    The random row sample sees the table's spread of rows, and low rank's real error."""
    layer = Layer("table", 4096 * 16, (4096, 16), "embedding")
    rng = np.random.default_rng(5)
    grad = np.zeros(layer.shape, np.float32)
    common = (np.arange(1, 4) * 16 * 2654435761) % 4096  # three tokens, on every 16th row
    rare = rng.choice(4096, 300, replace=False)
    grad[rare] = 0.3 * rng.standard_normal((300, 16)).astype(np.float32)
    grad[common] = 5 * rng.standard_normal((3, 16)).astype(np.float32)
    strided = grad[::4]
    assert np.count_nonzero(np.abs(strided).sum(1)) <= 3 + 300 // 4 + 30
    spec = "powersgd:rank=4"
    prof = profile.Profiler(("none", spec))
    prof.observe(0, layer, grad)
    cols = prof.table()[1][0, 1:].reshape(2, profile.PER_CANDIDATE)
    assert np.sqrt(cols[1, 0] / cols[1, 1]) > 0.3  # most of the rare rows' gradient is lost


def test_a_growing_residual_rules_a_compressor_out(monkeypatch) -> None:
    """Top-k 1% of a dense, noisy gradient holds back ever more of it (the residual grows
    past one step's gradient within a few steps); 8-bit's residual stays a small fraction.
    The policy then never picks top-k for the layer, even on a link where it would be the
    fastest, and says why in its table."""
    layer = Layer("w", 512 * 512, (512, 512), "linear")
    rng = np.random.default_rng(7)
    cands = ("none", "uniform:bits=8", "topk:ratio=0.01")
    prof = profile.Profiler(cands)
    for step in range(5):
        prof.observe(step, layer, rng.standard_normal(layer.shape).astype(np.float32))
    cols = prof.table()[1][0, 1:].reshape(len(cands), profile.PER_CANDIDATE)
    growth = np.sqrt(cols[:, profile.RESIDUAL])
    assert growth[0] == 0 and growth[1] < 0.1 and growth[2] > 1.5, growth
    # Priced on a slow link with a generous error budget, top-k would win on bytes alone.
    policy = AutoPolicy(candidates=cands, max_error=10.0, first=0, probe_steps=5,
                        cost=SLOW, latency="model", min_numel=0)
    free = AutoPolicy(candidates=cands, max_error=10.0, first=0, probe_steps=5, cost=SLOW,
                      latency="model", min_numel=0, max_residual=float("inf"))
    picks = []
    for pol in (policy, free):
        comm = Ranks()
        for step in range(6):
            pol.update(comm, step)
            if pol.wants_profile(step):
                pol.observe(step, layer, rng.standard_normal(layer.shape).astype(np.float32))
        picks.append(pol.decisions["w"])
    assert [p.split(":")[0] for p in picks] == ["uniform", "topk"], picks
    assert "topk" in policy.table().splitlines()[1]  # listed as held back


def test_small_layers_ride_with_their_bucket_never_in_more_bytes_than_the_fp16_hook() -> None:
    """Small layers ride in their bucket's one elementwise group; kept out of it (a sparse or
    low-rank group, a quantizer under Adam) they join a group the bucket sends anyway, in 16
    bits where the plan compresses: never float32 where PyTorch's fp16 hook sends 16 bits,
    never a collective of their own."""
    pol = AutoPolicy(optimizer="sgd")
    w, v = Layer("w", 1 << 20, (1024, 1024), "linear"), Layer("v", 1 << 16, (256, 256), "linear")
    b = Layer("b", 1024, (1024,), "1d")
    int4 = AutoPolicy(initial="uniform:bits=4").config.initial
    for big, ride in ((int4, None), ("fp16", None), ("topk:ratio=0.01", "fp16"),
                      ("powersgd:rank=4", "fp16"), ("none", "none")):
        spec = AutoPolicy(initial=big).config.initial
        pol.decisions = {"w": spec, "v": spec, "b": "none"}
        assert pol.choose_bucket([w, b, v]) == [spec, ride or spec, spec], big
    pol.decisions = {"w": int4, "v": "fp16", "b": "none"}  # two groups: into the 16-bit one
    assert pol.choose_bucket([w, b, v]) == [int4, "fp16", "fp16"]
    pol.decisions = {"w": int4, "v": "none", "b": "none"}  # into the uncompressed one
    assert pol.choose_bucket([w, b, v]) == [int4, "none", "none"]
    # A bucket of small layers only: 16 bits where the plan compresses, else as DDP sends it.
    assert pol.choose_bucket([b]) == ["fp16"]
    pol.decisions = {"w": "none", "v": "none", "b": "none"}
    assert pol.choose_bucket([b]) == ["none"]
    assert AutoPolicy(optimizer="sgd").choose_bucket([b]) == ["fp16"]  # before deciding
    assert AutoPolicy(initial="none").choose_bucket([b]) == ["none"]
    adam = AutoPolicy()  # under Adam: a quantizer's group keeps them out, 16 bits instead
    for big, ride in ((int4, "fp16"), ("fp16", "fp16")):
        adam.decisions = {"w": big, "v": big, "b": "none"}
        assert adam.choose_bucket([w, b, v]) == [big, ride, big], big


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_max_residual_must_be_positive(bad) -> None:
    with pytest.raises(ValueError, match="max_residual must be > 0"):
        AutoPolicy(max_residual=bad)
    assert AutoPolicy(max_residual=float("inf")).config.max_residual == float("inf")


@pytest.mark.parametrize("ours, engine, first", [(1e-3, 5e-3, False), (1e-3, 1.05e-3, True),
                                                 (2e-3, 1e-3, True)])
def test_a_bucket_sent_whole_goes_the_way_measured_faster(tmp_path, monkeypatch, ours, engine,
                                                          first) -> None:
    """The latency rounds time the engine's own allreduce beside ours: where ours is clearly
    faster (gloo's latency on a slow link), the hook sends uncompressed buckets through ours;
    else through the engine, as DDP does. The choice is kept with the measurements."""
    def one_round(comm, cands, plain, step, **kw):
        row = [ours if c == "none" else 3e-3 for c in cands]
        return np.array(row + ([engine] if kw.get("engine") else []))

    monkeypatch.setattr(auto.latencies, "one_round", one_round)
    pol = policy(tmp_path, latency=None)
    assert pol.engine_first() is None  # not measured yet
    drive(pol, Ranks(), range(6), model())
    assert pol.engine_first() is first
    assert pol.measured["engine_s"] == pytest.approx(engine)
    again = policy(tmp_path, latency=None)
    drive(again, Ranks(), range(6), model())
    assert again.cached and again.engine_first() is first  # read back from the cache
    assert AutoPolicy(latency="model").engine_first() is None

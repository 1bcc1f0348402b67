"""Registry, configuration validation and declared capabilities."""

from __future__ import annotations

import pytest

import compressors


def test_available_and_get_forms():
    names = compressors.available()
    for n in ("none", "fp16", "bf16", "uniform", "qsgd", "terngrad", "sign", "topk", "randomk",
              "threshold", "powersgd"):
        assert n in names
    assert compressors.get("topk", ratio=0.05) == compressors.get("topk:ratio=0.05")
    c = compressors.get("uniform:bits=4,stochastic=false,bucket_size=256")
    assert (c.bits, c.stochastic, c.bucket_size) == (4, False, 256)
    assert isinstance(compressors.get("none"), compressors.NoCompression)


@pytest.mark.parametrize("spec,params,match", [
    ("topk", {"ratio": 0.0}, "ratio"),
    ("topk", {"ratio": 1.5}, "ratio"),
    ("topk", {"ratio": -0.1}, "ratio"),
    ("randomk", {"ratio": 2}, "ratio"),
    ("uniform", {"bits": 3}, "bits"),
    ("uniform", {"bits": 16}, "bits"),
    ("uniform", {"bucket_size": 10}, "bucket_size"),
    ("sign", {"bucket_size": 0}, "bucket_size"),
    ("powersgd", {"rank": 0}, "rank"),
    ("qsgd", {"levels": 0}, "levels"),
    ("threshold", {"tau": -1.0}, "tau"),
    ("topk", {"ratio": float("nan")}, "ratio"),
    ("topk", {"approximate": "yes"}, "approximate"),
])
def test_bad_parameters_raise_value_error(spec, params, match):
    with pytest.raises(ValueError, match=match):
        compressors.get(spec, **params)


def test_error_messages_name_the_range():
    with pytest.raises(ValueError, match=r"ratio must be a number in \(0.0, 1.0\]"):
        compressors.get("topk", ratio=0)
    with pytest.raises(ValueError, match=r"1, 2, 4, 8"):
        compressors.get("uniform", bits=5)


def test_unknown_names_and_options():
    with pytest.raises(ValueError, match="unknown compressor"):
        compressors.get("zip")
    with pytest.raises(ValueError, match="no parameter"):
        compressors.get("topk", bits=8)
    with pytest.raises(ValueError, match="key=value"):
        compressors.get("topk:0.1")


def test_capabilities_are_declared():
    caps = {n: compressors.get(n).capabilities for n in compressors.available()}
    assert caps["none"].summable and caps["fp16"].summable and caps["bf16"].summable
    assert caps["randomk"].summable and caps["randomk"].needs_shared_seed
    assert caps["topk"].sparse and not caps["topk"].summable
    assert caps["topk"].same_size_on_all_ranks
    assert not compressors.get("topk", approximate=True).capabilities.same_size_on_all_ranks
    assert not caps["threshold"].same_size_on_all_ranks
    assert caps["powersgd"].allreduce_steps == ("p", "q") and caps["powersgd"].needs_shared_seed
    for c in caps.values():
        with pytest.raises(AttributeError):
            c.summable = True  # frozen


def test_configuration_is_frozen():
    c = compressors.get("topk")
    with pytest.raises(AttributeError):
        c.ratio = 0.5


def test_derive_seed_is_stable():
    # A fixed value: the derivation must never depend on the process (no salted hash()).
    assert compressors.derive_seed(0, "w", 0) == compressors.derive_seed(0, "w", 0)
    assert compressors.derive_seed(1, "w", 0) != compressors.derive_seed(0, "w", 0)
    import subprocess
    import sys
    code = "import compressors; print(compressors.derive_seed(3, 'layer.weight', 7))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == compressors.derive_seed(3, "layer.weight", 7)


SPECS = ["none", "fp16", "bf16", "uniform:bits=8", "qsgd", "terngrad", "sign",
         "topk:ratio=0.25", "randomk:ratio=0.25", "threshold:tau=0.5", "powersgd"]


@pytest.mark.parametrize("spec", SPECS)
def test_other_byte_order_compresses_by_value_and_comes_back_in_it(spec):
    import numpy as np

    native = np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)
    other = native.astype(native.dtype.newbyteorder("S"))
    comp = compressors.get(spec)  # a fresh one each time: PowerSGD keeps state per name
    want = comp.decompress(comp.compress(native, name="w"))
    comp = compressors.get(spec)
    got = comp.decompress(comp.compress(other, name="w"))
    assert got.dtype == other.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want)
    out = np.empty_like(other)
    comp = compressors.get(spec)
    comp.decompress(comp.compress(other, name="w"), out=out)
    np.testing.assert_array_equal(out.astype(np.float32), want)


@pytest.mark.parametrize("spec", SPECS)
def test_read_only_input_compresses_and_read_only_out_is_refused(spec):
    import numpy as np

    x = np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32)
    comp = compressors.get(spec)
    want = comp.decompress(comp.compress(x, name="w"))
    x.setflags(write=False)
    comp = compressors.get(spec)
    payload = comp.compress(x, name="w")
    np.testing.assert_array_equal(comp.decompress(payload), want)
    out = np.empty_like(x)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        comp.decompress(payload, out=out)


def test_feedback_twins_share_error_feedback_signatures():
    import inspect

    for method in ("compensate", "update", "update_sent", "step", "fusable", "residual_for"):
        want = inspect.signature(getattr(compressors.ErrorFeedback, method))
        for twin in (compressors.NoErrorFeedback, compressors.DGCFeedback):
            assert inspect.signature(getattr(twin, method)) == want, (twin, method)

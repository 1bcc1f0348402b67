"""The core's contracts (``collectives.core``) and the compressed-call value
(``collectives.Compression``): the real classes satisfy the protocols the core states, the
value refuses bad fields when built, and the keyword sugar and the value make the same call."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import collectives
import compressors
from collectives import Compression, core
from collectives.compressed import SCHEMES
from collectives.compressed.common import Ctx
from collectives.transport import as_communicator
from compressors.dtypes import lookup


def test_the_real_classes_are_what_the_core_says_they_are():
    comp = compressors.get("uniform:bits=8")
    assert isinstance(comp, core.Compressor)
    assert isinstance(compressors.ErrorFeedback(comp), core.Feedback)
    assert isinstance(as_communicator(None), core.Transport)
    for scheme in SCHEMES.values():
        assert isinstance(scheme.name, str) and callable(scheme.run)


def test_the_value_resolves_its_spec_and_is_frozen():
    call = Compression("topk:ratio=0.01", name="w", step=3)
    assert call.compressor == compressors.get("topk:ratio=0.01")
    assert call.key == "w" and Compression("fp16").key == "buffer"
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.step = 4  # type: ignore[misc]
    assert call.at(step=4).step == 4 and call.step == 3
    numpy_step = Compression("fp16", step=np.int64(2**63 - 1)).step  # a numpy integer: an int
    assert type(numpy_step) is int and numpy_step == 2**63 - 1


@pytest.mark.parametrize("fields, error, words", [
    ({"compressor": 3}, TypeError, "spec string"),
    ({"compressor": "uniform:bits=8", "feedback": object()}, TypeError, "ErrorFeedback"),
    ({"compressor": "uniform:bits=8",
      "feedback": compressors.ErrorFeedback(compressors.get("uniform:bits=8"))},
     ValueError, "pass name="),
    ({"compressor": "uniform:bits=8", "name": "w",
      "feedback": compressors.ErrorFeedback(compressors.get("uniform:bits=4"))},
     ValueError, "build it with the call's compressor"),
    ({"compressor": "topk:ratio=0.1", "scheme": "dense"}, ValueError, "use one of"),
    ({"compressor": "topk:ratio=0.1", "scheme": "bogus"}, ValueError, "unknown scheme"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": "bogus"}, ValueError,
     "unknown sparse algorithm"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": "gtopk:k=-1"}, ValueError,
     "k must be an integer from 1"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": "gtopk:k=0"}, ValueError,
     r"k must be an integer from 1 to 2\*\*63 - 1 .* k=0 keeps none"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": f"gtopk:k={2**63}"}, ValueError,
     "compare k as a 64-bit integer"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": "dsar:k=3"}, ValueError,
     "only gtopk takes"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": "gtopk:top=3"}, ValueError,
     "only gtopk takes"),
    ({"compressor": "topk:ratio=0.1", "sparse_algorithm": 3}, TypeError, "gtopk:k=1000"),
    ({"compressor": "fp16", "hierarchy": "tall"}, ValueError, "hierarchy must be one of"),
    ({"compressor": "fp16", "name": 123}, TypeError, "name must be a str .* got int 123"),
    ({"compressor": "fp16", "step": None}, TypeError, "step must be an integer .* NoneType"),
    ({"compressor": "fp16", "step": True}, TypeError, "step must be an integer"),
    ({"compressor": "fp16", "step": 1.0}, TypeError, "step must be an integer"),
    ({"compressor": "fp16", "step": 2**70}, ValueError, r"step must be an integer in \[0, "
                                                         r"2\*\*63 - 1\]"),
    ({"compressor": "fp16", "step": -1}, ValueError, "step must be an integer in"),
    ({"compressor": "fp16", "stats": []}, TypeError, "stats must be a dict .* got list"),
    ({"compressor": "powersgd:rank=2", "hierarchy": "two_level"}, ValueError, "flat"),
])
def test_a_bad_field_is_refused_when_the_value_is_built(fields, error, words):
    with pytest.raises(error, match=words):
        Compression(**fields)
    with pytest.raises(error, match=words):  # the same through allreduce's keywords
        collectives.allreduce(np.ones(8, np.float32), **fields)


def test_the_sugar_becomes_the_value_in_one_place():
    assert Compression.of() is None
    assert Compression.of(scheme="dense", name="w") is None  # no compressor: a dense call
    assert Compression.of("fp16", name="w") == Compression("fp16", name="w")
    value = Compression("fp16", name="w")
    assert Compression.of(value) is value
    assert Compression.of(value, step=2) == value.at(step=2)
    with pytest.raises(TypeError, match="once"):
        Compression.of(value, compressor="fp16")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Compression.of("fp16", bogus=1)
    with pytest.raises(ValueError, match="needs a compressor"):
        Compression.of(feedback=compressors.ErrorFeedback(compressors.get("fp16")))


@pytest.mark.parametrize("spec", ["uniform:bits=8", "topk:ratio=0.05", "randomk:ratio=0.1",
                                  "fp16"])
def test_the_value_and_the_keywords_make_the_same_call(spec):
    x = np.random.default_rng(1).standard_normal(1009).astype(np.float32)
    runs = []
    for by_value in (True, False):
        fb = compressors.ErrorFeedback(compressors.get(spec))
        stats: dict = {}
        outs = []
        for step in range(3):
            kw = dict(feedback=fb, name="w", step=step, stats=stats)
            outs.append(collectives.allreduce(x, compress=Compression(spec, **kw))
                        if by_value else collectives.allreduce(x, compressor=spec, **kw))
        runs.append((outs, fb.residuals["w"].copy(), stats["scheme"]))
    (a, ra, sa), (b, rb, sb) = runs
    assert sa == sb
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))
    assert np.array_equal(ra, rb)


def test_the_fields_every_rank_shares():
    call = Compression("randomk:ratio=0.1", name="w", step=5)
    dtype = lookup("float32")
    f = call.fields("sum", "ring", 100, dtype)
    assert f["element count"] == 100 and f["k"] == -1
    # random-k's choices are seeded by name and step: they must agree too
    assert f["step (it seeds the shared random choices)"] == 5
    assert "step (it seeds the shared random choices)" not in \
        Compression("uniform:bits=8", step=5).fields("sum", "ring", 100, dtype)
    assert call.fields("sum", "ring", 100, dtype) != call.at(step=6).fields("sum", "ring", 100,
                                                                             dtype)


def test_the_value_builds_the_schemes_state():
    comm = as_communicator(None)
    dtype = lookup("float64")
    ctx = Compression("uniform:bits=8", name="w", step=2, sparse_algorithm="gtopk:k=7").ctx(
        comm, 0, np.zeros(4), dtype, "ring")
    assert isinstance(ctx, Ctx)
    assert (ctx.name, ctx.step, ctx.algorithm, ctx.sparse_algorithm, ctx.k) == \
        ("w", 2, "ring", "gtopk", 7)
    assert ctx.acc == np.float64


def test_a_warm_call_takes_its_route_without_deciding_again(monkeypatch):
    """The first call of a kind decides its levels and scheme (collective set-up: topology,
    the model's fit, tuning); the next calls of that kind on the communicator reuse the
    route, calling none of them, and give the same bits as a cold call."""
    from tests.nccl_order import World
    calls: dict[str, int] = {}

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(core, "choose", counted("choose", core.choose))
    monkeypatch.setattr(core.hierarchical, "levels", counted("levels", core.hierarchical.levels))
    monkeypatch.setattr(core.tuning, "ready", counted("ready", core.tuning.ready))
    monkeypatch.setattr(core.two_level, "prepare", counted("prepare", core.two_level.prepare))
    x = np.linspace(-1, 1, 1009, dtype=np.float32)

    def twice(comm):
        first = collectives.allreduce(x, comm=comm, compressor="uniform:bits=8", name="w")
        cold = dict(calls)
        again = collectives.allreduce(x, comm=comm, compressor="uniform:bits=8", name="w")
        return first, again, cold

    world = World(2, ordered=False)
    outs = world.run(twice)
    assert calls == {"choose": 2, "levels": 2, "ready": 2, "prepare": 2}, calls
    assert all(np.array_equal(o[0], o[1]) for o in outs)
    assert len(world.comms[0].cache.routes) == 1
    # another kind (another size) decides its own route
    world.run(lambda comm: collectives.allreduce(x[:1000], comm=comm,
                                                 compressor="uniform:bits=8"))
    assert calls["choose"] == 4 and len(world.comms[1].cache.routes) == 2


def test_a_resolved_scheme_is_not_checked_again():
    call = Compression("topk:ratio=0.01", name="w")
    assert call.resolved("auto") is call
    got = call.resolved("sparse")
    assert got.scheme == "sparse" and got.name == "w" and call.scheme == "auto"

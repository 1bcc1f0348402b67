"""State dicts mutated at random (bad values, wrong types, shapes, dtypes and names, missing
keys): every stateful class either loads them and then works with finite results, or raises
ValueError/TypeError/KeyError with a message and stays as it was. Never silent corruption."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collectives.ddp as cddp
import compressors
from compressors import DGCFeedback, ErrorFeedback, NoErrorFeedback
from tests.wrapped import wrapped

from .helpers import gaussian

SIZES = {"a": 64, "b": 32}
BAD = [float("nan"), float("inf"), -1, -5, 1e300, "x", None, [1, 2], {}, True, 2**70,
       np.zeros(3, np.int64), np.full(3, np.nan, np.float32), np.zeros((2, 2), np.float16),
       np.zeros(7, np.float32), np.zeros(64, np.float64), np.ones((5, 2), np.float32),
       {"a": np.zeros(5, np.float32)}, {7: np.zeros(3, np.float32)}]
ERRORS = (ValueError, TypeError, KeyError)


def paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into nested dicts (arrays and scalars are leaves)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    return out


def mutate(state: dict, path: tuple, op: str, value: Any) -> dict:
    new = copy.deepcopy(state)
    parent = new
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    if op == "delete":
        del parent[key]
    elif op == "rename":
        parent[f"{key}.renamed"] = parent.pop(key)
    else:
        parent[key] = value
    return new


def mutations(state: dict) -> st.SearchStrategy:
    return st.tuples(st.sampled_from(paths(state)), st.sampled_from(["set", "delete", "rename"]),
                     st.sampled_from(BAD))


def snapshot(obj: Any) -> Any:
    d = obj.state_dict() if not isinstance(obj, compressors.PowerSGD) else obj.warm_state()
    return repr(copy.deepcopy(d))


def check(make: Callable[[], Any], state: dict, use: Callable[[Any], None],
          load: Callable[[Any, dict], None] = lambda o, s: o.load_state_dict(s)) -> None:
    target = make()
    before = snapshot(target)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # unused names warn: allowed
            load(target, state)
    except ERRORS as e:
        assert str(e), f"{type(e).__name__} without a message"
        assert snapshot(target) == before, "a refused state changed the object"
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            use(target)
    except ValueError as e:  # a loaded piece that does not fit is named when it is used
        assert "loaded" in str(e), str(e)


def _feedback_use(ef: Any) -> None:
    assert np.isfinite(ef.beta) and np.isfinite(ef.gamma) and ef.beta >= 0 and ef.gamma >= 0
    for step in range(2):
        for name, n in SIZES.items():
            g = gaussian(n, seed=step)
            out = ef.compressor.decompress(ef.step(g, name, step))
            assert np.isfinite(out).all() and np.isfinite(ef.compensate(g, name)).all()


def _trained(cls: type) -> Any:
    ef = cls(compressors.get("topk", ratio=0.2))
    for step in range(2):
        for name, n in SIZES.items():
            ef.step(gaussian(n, seed=step), name, step)
    return ef


FEEDBACK_STATES = {cls: _trained(cls).state_dict() for cls in (ErrorFeedback, DGCFeedback)}
FEEDBACK_STATES[NoErrorFeedback] = {"beta": 1.0, "gamma": 1.0,
                                    "residuals": dict(FEEDBACK_STATES[ErrorFeedback]["residuals"])}
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("cls", [ErrorFeedback, DGCFeedback, NoErrorFeedback])
def test_feedback_state_fuzz(cls: type) -> None:
    state = FEEDBACK_STATES[cls]

    @FUZZ
    @given(mutations(state))
    def run(m: tuple) -> None:
        check(lambda: cls(compressors.get("topk", ratio=0.2)), mutate(state, *m), _feedback_use)

    run()


def _powersgd() -> compressors.PowerSGD:
    c = compressors.get("powersgd", rank=2)
    c.compress(gaussian((20, 12)), name="w", step=0)
    c.compress(gaussian((16, 8)), name="v", step=0)
    return c


def _powersgd_use(c: compressors.PowerSGD) -> None:
    for name, shape in (("w", (20, 12)), ("v", (16, 8))):
        assert np.isfinite(c.decompress(c.compress(gaussian(shape), name=name, step=1))).all()


def test_powersgd_warm_state_fuzz() -> None:
    state = {"q": _powersgd().warm_state()}

    @FUZZ
    @given(mutations(state))
    def run(m: tuple) -> None:
        mutated = mutate(state, *m)
        check(_powersgd, mutated, _powersgd_use,
              load=lambda c, s: c.load_warm_state(s["q"]))

    run()


# -- CompressionState ----------------------------------------------------------------------

def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _comp_state() -> cddp.CompressionState:
    from mpi4py import MPI

    return cddp.CompressionState(MPI.COMM_SELF, policy="powersgd:rank=1").bind(wrapped(_net()))


def _saved() -> dict:
    """A state dict as a rank of a one-process job saves it after some steps."""
    sd = _comp_state().state_dict()
    sd["step"] = 5
    sd["residuals"] = {n: gaussian(p.numel(), seed=3) for n, p in _net().named_parameters()}
    sd["powersgd_q"] = {"powersgd:rank=1": {"0.weight": gaussian((12, 1)),
                                            "2.weight": gaussian((8, 1))}}
    return sd


def _comp_use(s: cddp.CompressionState) -> None:
    assert isinstance(s.step, int) and s.step >= 0
    sizes = {n: p.numel() for n, p in _net().named_parameters()}
    for name, res in s._pool.items():
        assert res.size == sizes[name] and np.isfinite(res).all()
    comp = s.compressor("powersgd:rank=1")
    for name, m in (("0.weight", 12), ("2.weight", 8)):
        assert np.isfinite(comp.warm_q(name, m, 1)).all()


def test_compression_state_fuzz() -> None:
    state = _saved()
    check(_comp_state, state, _comp_use)  # the unmutated dict loads and works

    @FUZZ
    @given(mutations(state))
    def run(m: tuple) -> None:
        check(_comp_state, mutate(state, *m), _comp_use)

    run()


def test_compression_state_names_what_is_wrong() -> None:
    sd = _saved()
    s = _comp_state()
    for key, value, words in (("step", -5, "step must be an integer >= 0, got -5"),
                              ("step", 2.5, "step must be an integer"),
                              ("residuals", {"0.weight": np.zeros(5, np.float32)},
                               r"\('0.weight', 5, 96\)"),
                              ("residuals", {"0.weight": np.full(96, np.nan, np.float32)},
                               "NaN|finite")):
        with pytest.raises(ValueError, match=words):
            s.load_state_dict({**sd, key: value})
    assert s.step == 0 and not s._pool
    with pytest.raises(ValueError, match=r"missing \['powersgd_q'\]"):
        s.load_state_dict({k: v for k, v in sd.items() if k != "powersgd_q"})
    with pytest.warns(RuntimeWarning, match=r"\['old.weight'\] match no parameter"):
        s.load_state_dict({**sd, "residuals": {**sd["residuals"],
                                               "old.weight": np.zeros(4, np.float32)}})
    assert set(s._pool) == set(sd["residuals"]) and s.step == 5
    bad_q = copy.deepcopy(sd)
    bad_q["powersgd_q"]["powersgd:rank=1"]["0.weight"][0] = np.nan
    with pytest.warns(RuntimeWarning, match="'0.weight' holds NaN/Inf"):
        _comp_state().load_state_dict(bad_q)


def test_residuals_loaded_before_bind_are_checked_at_bind() -> None:
    from mpi4py import MPI

    s = cddp.CompressionState(MPI.COMM_SELF, policy="uniform:bits=8")
    s.load_state_dict({**_saved(), "residuals": {"gone": np.zeros(3, np.float32)}})
    with pytest.warns(RuntimeWarning, match="gone"):
        s.bind(wrapped(_net()))
    assert not s._pool

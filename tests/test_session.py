"""The one front door: ``collectives.Session`` owns the policy, the compressor instances, one
residual store keyed by (spec, scope, name), ``min_numel``, validate-once and the step counts,
and every torch adapter (DDP hook, FSDP reduce-scatter, backend, optimizers) holds one."""

from __future__ import annotations

import pickle
from datetime import timedelta

import numpy as np
import pytest

import collectives
import compressors
from collectives import Session
from collectives.config import MIN_NUMEL

SPEC = "uniform:bits=8"


def _fill(s: Session, scope: str = "", name: str = "w", spec: str | None = None) -> np.ndarray:
    """Give ``s`` one residual of 1000 elements under (``spec``, else its spec, ``scope``,
    ``name``)."""
    spec = spec or s.spec
    fb = s.feedback(spec, scope)
    assert fb is not None
    x = np.random.default_rng(len(scope)).standard_normal(1000).astype(np.float32)
    sent = fb.compensate(x, name)
    fb.update(name, sent, s.compressor(spec).compress(sent, name=name))
    return fb.residuals[name].copy()


def test_one_store_keyed_by_spec_scope_and_name() -> None:
    s = Session(SPEC)
    assert s.feedback(s.spec) is s.feedback(s.spec) is s.held(s.spec)
    assert s.feedback(s.spec, "a") is not s.feedback(s.spec)  # another scope, another memory
    assert s.held("topk:ratio=0.01") is None  # held() makes nothing
    assert s.compressor(s.spec) is s.feedback(s.spec).compressor  # one instance per spec
    kept = _fill(s, name="layer.0")
    assert np.array_equal(s.held(s.spec).residuals["layer.0"], kept)
    assert [(spec, scope) for spec, scope, _ in s.feedbacks()] == [(s.spec, ""), (s.spec, "a")]
    assert Session(SPEC, error_feedback=False).feedback(s.spec) is None


def test_a_compressor_instance_is_used_as_it_is() -> None:
    comp = compressors.get("powersgd:rank=2")
    s = Session(comp)
    assert s.compressor(s.spec) is comp


def test_scopes_past_the_bound_are_dropped_least_recently_used_first() -> None:
    s = Session(SPEC, max_scopes=2)
    for scope in ("a", "b", "a", "c"):  # "a" used again: "b" is the least recent
        s.feedback(s.spec, scope)
    assert s.scopes() == ["a", "c"] and s.evicted == 1
    s.feedback(s.spec)  # the unscoped memory never counts against the bound
    assert s.scopes() == ["a", "c"] and s.held(s.spec) is not None


def test_owner_scopes_are_one_per_front_door_and_never_dropped() -> None:
    s = Session(SPEC, max_scopes=1)
    assert [s.owner_scope("ddp"), s.owner_scope("ddp"), s.owner_scope("ddp")] == \
        ["", "ddp#1", "ddp#2"]
    s.feedback(s.spec, "ddp#1"), s.feedback(s.spec, "a"), s.feedback(s.spec, "b")
    assert s.scopes() == ["ddp#1", "b"] and s.evicted == 1  # only "a" counted and dropped
    assert s.validate_once("w", SPEC, 10, "ddp#1") and s.validate_once("w", SPEC, 10)
    with pytest.raises(ValueError, match="owner kind"):
        s.owner_scope("a|b")


def test_min_numel_steps_and_validate_once() -> None:
    s = Session(SPEC)
    assert s.min_numel == MIN_NUMEL and not s.compresses(MIN_NUMEL - 1) and s.compresses(MIN_NUMEL)
    assert Session(SPEC, min_numel=0).compresses(1) and not Session(SPEC, min_numel=0).compresses(0)
    assert [s.next_step("a"), s.next_step("b"), s.next_step("a")] == [0, 0, 1]
    assert s.validate_once("a", SPEC, 10) and not s.validate_once("a", SPEC, 10)
    assert s.validate_once("a", SPEC, 11)  # another size is another call


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"error_feedback": 1}, "error_feedback must be True or False"),
    ({"min_numel": -1}, "min_numel must be an integer >= 0"),
    ({"min_numel": True}, "min_numel must be an integer >= 0"),
    ({"max_scopes": 0}, "max_scopes must be None or an integer >= 1"),
    ({"hierarchy": "ring"}, "hierarchy must be one of"),
])
def test_bad_settings_are_refused_by_name(kwargs, words) -> None:
    with pytest.raises(ValueError, match=words):
        Session(SPEC, **kwargs)


def test_a_one_compressor_door_refuses_a_per_layer_policy() -> None:
    with pytest.raises(ValueError, match="one compressor .* 'auto"):
        _ = Session("auto").spec
    assert Session("int8").spec.startswith("uniform:bits=8")


#: A policy of two compressors: PowerSGD's warm starts beside 8-bit residuals.
PSGD = "powersgd:rank=1"
BOTH = [("kind=embedding", PSGD), ("*", SPEC)]


def test_state_dict_round_trip_restores_residuals_steps_and_warm_starts() -> None:
    s = Session(BOTH, max_scopes=4)
    spec = Session(SPEC).spec
    kept = {"": _fill(s, spec=spec), "1000:float32#0": _fill(s, "1000:float32#0", spec=spec)}
    s.next_step("w"), s.next_step("w")
    psgd = s.compressor(Session(PSGD).spec)
    psgd.load_warm_state({"m": np.ones((4, 1), np.float32)})  # a warm start to keep
    state = pickle.loads(pickle.dumps(s.state_dict()))
    t = Session(BOTH, max_scopes=4)
    t.load_state_dict(state)
    for scope, res in kept.items():
        assert np.array_equal(t.held(spec, scope).residuals["w"], res)
    assert t.next_step("w") == 2
    assert t.warm_starts().keys() == s.warm_starts().keys() == {Session(PSGD).spec}
    for spec, qs in s.warm_starts().items():
        for name, q in qs.items():
            assert np.array_equal(t.warm_starts()[spec][name], q)


@pytest.mark.parametrize(("change", "error", "words"), [
    (lambda d: d.pop("steps"), ValueError, r"missing \['steps'\]"),
    (lambda d: d.update(version=7), ValueError, "version 1"),
    (lambda d: d.update(steps={"w": -1}), ValueError, "steps must map call names"),
    (lambda d: d.update(feedback=[]), TypeError, "feedback must be a dict"),
    (lambda d: d.update(feedback={"no bar": {}}), ValueError, "'spec|scope'"),
    (lambda d: d["feedback"][next(iter(d["feedback"]))].update(residuals={"w": "x"}),
     ValueError, "residuals"),
])
def test_a_bad_state_dict_raises_by_name_and_changes_nothing(change, error, words) -> None:
    s = Session(SPEC)
    before = _fill(s)
    state = s.state_dict()
    change(state)
    with pytest.raises(error, match=words):
        s.load_state_dict(state)
    assert np.array_equal(s.held(s.spec).residuals["w"], before) and s.next_step("x") == 0


def test_a_state_saved_under_another_compressor_is_refused_naming_both() -> None:
    saved = Session("topk:ratio=0.01")
    _fill(saved)
    s = Session(SPEC)
    before = _fill(s)
    with pytest.raises(ValueError, match=r"saved under the compressor 'topk:.*this session's "
                                         r"policy uses 'uniform:bits=8"):
        s.load_state_dict(saved.state_dict())
    warm = Session(PSGD)
    warm.compressor(warm.spec).load_warm_state({"m": np.ones((4, 1), np.float32)})
    with pytest.raises(ValueError, match=r"saved under the compressor 'powersgd:"):
        s.load_state_dict(warm.state_dict())  # warm starts alone, as well
    assert np.array_equal(s.held(s.spec).residuals["w"], before) and not s.warm_starts()


def test_a_policy_says_which_compressors_it_can_choose() -> None:
    from collectives.policy import Policy

    spec = Session(SPEC).spec
    assert Session(SPEC).policy.choices() == {spec}
    assert Session(BOTH).policy.choices() == {spec, Session(PSGD).spec}
    assert "none" in Session("auto").policy.choices()
    assert Policy().choices() is None  # a policy of the user's own: not known in advance


def test_a_refused_load_applies_nothing_of_what_was_checked_before() -> None:
    two = [("kind=embedding", PSGD), ("kind=conv", "powersgd:rank=2"), ("*", SPEC)]
    first, second = (Session(spec).spec for spec in (PSGD, "powersgd:rank=2"))
    s = Session(two)
    s.compressor(first).load_warm_state({"m": np.ones((4, 1), np.float32)})
    s.compressor(second).load_warm_state({"m": np.ones((4, 2), np.float32)})
    state = s.state_dict()
    state["warm_starts"][second]["m"] = np.ones((4, 3), np.float32)  # not rank 2
    state["steps"] = {"w": 5}
    t = Session(two)
    with pytest.raises(ValueError, match="rank 3"):
        t.load_state_dict(state)  # the second warm start is refused: the first is not taken
    assert not t.warm_starts() and t.next_step("w") == 0


def test_loading_keeps_the_feedback_objects_adapters_hold() -> None:
    s = Session(SPEC)
    held = s.feedback(s.spec)  # what an adapter (FSDP, an optimizer) keeps a reference to
    other = Session(SPEC)
    kept = _fill(other)
    s.load_state_dict(other.state_dict())
    assert s.held(s.spec) is held and np.array_equal(held.residuals["w"], kept)
    s.load_state_dict(Session(SPEC).state_dict())  # saved with no residual: none left
    assert s.held(s.spec) is held and not held.residuals


def test_residuals_into_a_session_without_feedback_warn_and_are_dropped() -> None:
    s = Session(SPEC)
    _fill(s)
    t = Session(SPEC, error_feedback=False)
    with pytest.warns(RuntimeWarning, match="error_feedback=False"):
        t.load_state_dict(s.state_dict())
    assert not list(t.feedbacks())


def test_every_torch_front_door_holds_a_session() -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    import collectives.backend
    from collectives.backend import BackendConfig, CompressedProcessGroup
    from collectives.ddp import CompressionState
    from collectives.fsdp import CompressedReduceScatter

    st = CompressionState(policy=Session(SPEC, error_feedback=False, hierarchy="flat"))
    assert isinstance(st.session, Session) and st.policy is st.session.policy
    assert (st.error_feedback, st.hierarchy) == (False, "flat")
    assert st.compressor(SPEC) is st.session.compressor(SPEC) and st.feedback(SPEC) is None
    assert CompressionState(policy=st.session).session is st.session  # one shared session
    with pytest.raises(TypeError, match="to the Session, not beside it"):
        CompressionState(policy=st.session, error_feedback=False)
    rs = CompressedReduceScatter("topk:ratio=0.01", min_numel=5)
    assert rs.session.min_numel == rs.min_numel == 5 and rs.feedback is rs.session.held(
        rs.session.spec) and rs.compressor is rs.session.compressor(rs.session.spec)
    shared = Session("uniform:bits=4")
    one, two = CompressedReduceScatter(session=shared), CompressedReduceScatter(session=shared)
    assert one.feedback is two.feedback is shared.held(shared.spec)
    with pytest.raises(TypeError, match="to the Session, not beside it"):
        CompressedReduceScatter("sign", session=shared)
    with pytest.raises(ValueError, match="one compressor"):
        CompressedReduceScatter(session=Session("auto"))
    pg = CompressedProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=30),
                                BackendConfig(feedback=True, min_numel=0,
                                              feedback_max_tensors=2).checked())
    try:
        assert pg.session.max_scopes == 2 and pg.session.min_numel == 0
        x = torch.randn(1000)
        for _ in range(2):
            pg.allreduce([x]).wait()
        assert pg.session.scopes() == [f"1000:{x.dtype}#0"]  # one buffer, one scope
        assert pg.session.next_step(f"backend/1000:{str(x.dtype).removeprefix('torch.')}") == 2
        assert collectives.backend.session(pg) is pg.session
        with pytest.raises(TypeError, match="made with the 'compcoll' backend"):
            collectives.backend.session(object())
        again = Session(pg.session.spec, max_scopes=2)
        again.load_state_dict(pg.session.state_dict())
        assert again.scopes() == pg.session.scopes()
    finally:
        pg.shutdown()


def test_the_optimizers_keep_their_residuals_in_a_session() -> None:
    torch = pytest.importorskip("torch")
    from collectives.optim import DiLoCo, OneBitAdam

    model = torch.nn.Linear(4, 3)
    opt = OneBitAdam(model.parameters(), freeze_step=2)
    assert opt.feedback is opt.session.held(opt.session.spec)
    loco = DiLoCo(torch.optim.SGD(model.parameters(), lr=0.1), model, sync_every=2,
                  compressor="uniform:bits=8", outer_lr=1.0, outer_momentum=0.0)
    assert loco.feedback is loco.session.held(loco.compressor)
    plain = DiLoCo(torch.optim.SGD(model.parameters(), lr=0.1), model, sync_every=2,
                   compressor="none", outer_lr=1.0, outer_momentum=0.0)
    assert plain.feedback is None and not list(plain.session.feedbacks())


def test_session_is_exported() -> None:
    import compcoll

    assert compcoll.Session is collectives.Session is Session
    assert repr(Session(SPEC)).startswith("Session('uniform:bits=8")


def test_the_optimizers_wait_as_long_as_their_process_group() -> None:
    """Like torch's optimizers they take no timeout: a torch group's own (45 s here), the
    defaults (None) on an MPI communicator; the attribute can be set after construction."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from mpi4py import MPI

    from collectives.optim import DiLoCo, OneBitAdam

    model = torch.nn.Linear(4, 3)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=timedelta(seconds=45))
    try:
        pg = dist.group.WORLD
        assert OneBitAdam(model.parameters(), comm=pg).timeout == 45.0
        loco = DiLoCo(torch.optim.SGD(model.parameters(), lr=0.1), model, sync_every=2, comm=pg)
        assert loco.timeout == 45.0
    finally:
        dist.destroy_process_group()
    opt = OneBitAdam(model.parameters(), comm=MPI.COMM_SELF)
    assert opt.timeout is None
    opt.timeout = 5.0
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    assert opt.t == 1
    with pytest.raises(TypeError, match="timeout"):
        OneBitAdam(model.parameters(), timeout=5)

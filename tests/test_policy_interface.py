"""The Policy interface: what the DDP hook calls on any policy, and ``table()`` once bound."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from collectives.policy import AutoPolicy, Fixed, Layer, Policy, Rules, Table, as_policy
from tests.test_policy import SLOW, Ranks, lay
from tests.wrapped import wrapped

DDP = Path(__file__).resolve().parents[1] / "collectives" / "ddp"
LAYERS = [lay("fc.weight", 1 << 16), lay("fc.bias", 256, "1d"), lay("emb", 1 << 17, "embedding")]
STATIC = [Fixed("uniform:bits=8"), Rules([("numel<16384", "none"), ("*", "fp16")]),
          Table({"fc.weight": "fp16"}, default="none"), as_policy({"emb": "uniform:bits=4",
                                                                   "*": "none"})]


@pytest.mark.parametrize("policy", STATIC, ids=lambda p: type(p).__name__)
def test_table_needs_no_arguments_once_bound(policy: Policy) -> None:
    assert "bind" in policy.table()  # before: says how to give it the layers, no error
    policy.bind(LAYERS)
    table = policy.table()
    for layer in LAYERS:
        line = next(x for x in table.splitlines() if x.startswith(layer.name + " "))
        assert line.split()[-1].split(":")[0] == policy.choose(layer).split(":")[0], table
    assert policy.table(LAYERS[:1]).count("\n") == 1  # given layers: those alone


def test_the_state_binds_its_policy_so_the_readme_line_prints_a_table() -> None:
    torch = pytest.importorskip("torch")
    import collectives.ddp as cddp

    model = wrapped(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2)))
    for policy in ("uniform:bits=8", [("numel<16", "none"), ("*", "fp16")],
                   {"0.weight": "fp16", "*": "none"}):
        state = cddp.CompressionState(policy=policy).bind(model)
        table = state.policy.table()  # as the README prints it
        assert all(name in table for name, _ in model.module.named_parameters()), table
    auto = cddp.CompressionState(policy="auto").bind(model)
    assert "no decision yet" in auto.policy.table()


def test_every_policy_method_the_hook_calls_is_declared_on_policy() -> None:
    """The DDP integration calls policies through the base interface only: no getattr on a
    policy, no type-checker escapes, and every method it calls exists on Policy."""
    called: set[str] = set()
    for path in DDP.glob("*.py"):
        text = path.read_text()
        for line in text.splitlines():
            if "policy" in line:
                assert "type: ignore" not in line and "getattr(" not in line, (path, line)
        called |= set(re.findall(r"policy\.(\w+)\(", text))
    assert {"wants_profile", "observe", "observe_norm", "see_bucket", "update",
            "wants_norm", "choose_bucket", "bind"} <= called, called
    missing = [name for name in called if not callable(getattr(Policy, name, None))]
    assert not missing, missing


def test_a_static_policy_ignores_what_the_hook_reports() -> None:
    policy = Fixed("fp16")
    layer = LAYERS[0]
    policy.see_bucket(0, [layer], ["torch.float32"])
    policy.observe(0, layer, np.zeros(layer.numel), 0)
    policy.observe_norm(0, 1.0, 0)
    assert not policy.wants_profile(0) and not policy.wants_profile(0, layer.name)
    assert not policy.wants_norm(0) and policy.update(Ranks(), 0, plain=None) is False
    assert policy.instances() == {} and Rules([("*", "none")]).instances() == {}


def test_a_compressor_passed_in_is_the_one_the_hook_uses() -> None:
    import compressors

    comp = compressors.get("powersgd:rank=2")
    policy = Fixed(comp)
    assert policy.instances() == {policy.spec: comp}


#: AutoPolicy.state_dict's keys: split into parts, the format stays the same.
STATE_KEYS = {"decisions", "rows", "log", "total_error", "measured", "fitted", "collective_s",
              "measurements", "cached", "_ready", "_layers", "_bucket", "_layout", "_tried",
              "_schedule", "_file", "_probe_start", "_last_eval", "_regime", "_live_used",
              "signals", "profiler", "_speeds", "_losses", "_watch", "_fallback", "_trial",
              "_trial_result", "_narrow", "_loss_before"}
#: Keys a state saved before them lacks (the parts keep their defaults).
ADDED_KEYS = {"_narrow", "_loss_before"}


def test_the_automatic_policys_state_dict_keeps_its_format() -> None:
    policy = AutoPolicy(first=0, probe_steps=1, cost=SLOW, latency="model", cache=False)
    comm = Ranks()
    policy.update(comm, 0)
    big = Layer("w", 1 << 16, (256, 256), "linear")
    policy.see_bucket(0, [big], ["torch.float32"])
    policy.observe(0, big, np.random.default_rng(0).standard_normal(big.numel), 0)
    policy.observe_norm(0, 1.0, 0)
    policy.update(comm, 1)
    state = policy.state_dict()
    assert set(state) == STATE_KEYS
    assert state["_layout"] == {"w": (0, 0, "torch.float32")} and state["_last_eval"] == 1
    again = AutoPolicy(first=0, probe_steps=1, cost=SLOW, latency="model", cache=False)
    again.load_state_dict(state)
    assert again.decisions == policy.decisions and again.rows == policy.rows
    assert again.table() == policy.table() and again.state_dict().keys() == state.keys()
    older = AutoPolicy(first=0, probe_steps=1, cost=SLOW, latency="model", cache=False)
    older.load_state_dict({k: v for k, v in state.items() if k not in ADDED_KEYS})
    assert older.decisions == policy.decisions and older._decider.narrow == {}
    older = {k: v for k, v in state.items() if k != "signals"}  # before the signals were kept
    AutoPolicy(cost=SLOW, latency="model").load_state_dict(older)
    # Before the loss check, the codec speeds and the Adam-space columns: rows 7 wide.
    cands = policy.config.candidates
    older = {k: v for k, v in state.items()
             if k not in ("_speeds", "_losses", "_watch", "_fallback")}
    older["measurements"] = {n: r[:1 + 7 * len(cands)] for n, r in
                             state["measurements"].items()}
    older["profiler"] = {**state["profiler"], "stats": {"w": np.zeros(1 + 7 * len(cands))}}
    del older["profiler"]["moments"]
    again = AutoPolicy(first=0, probe_steps=1, cost=SLOW, latency="model", cache=False)
    again.load_state_dict(older)
    assert again.decisions == policy.decisions and not again.measurements  # measured again
    again.update(comm, 2)
    assert again.wants_profile(2, "w") and not again._probing.profiler.stats

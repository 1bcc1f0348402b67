"""The automatic policy's phase machine, its named table and its tunables (one process)."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.policy import AutoConfig, AutoPolicy, Layer, as_policy, columns
from collectives.policy.tunables import Tunables
from tests.test_policy_cache import Ranks, drive, model, policy


def test_the_phases_follow_the_table(tmp_path) -> None:
    """Warm-up before ``first``, a bucket at a time profiled, then decided; a model that grows
    is profiled again, and decided again at the end of it."""
    pol, comm, seen = policy(tmp_path, cache=False), Ranks(), []
    for step in range(12):
        drive(pol, comm, range(step, step + 1), model())
        seen.append(pol.phase)
    assert seen[0] == "warm-up" and seen[-1] == "decided", seen
    assert seen.index("decided") > seen.index("probing") > 0, seen
    grown = model() + [[Layer("extra.weight", 128 * 128, (128, 128), "linear")]]
    drive(pol, comm, range(12, 13), grown)
    drive(pol, comm, range(13, 14), grown)
    assert pol.phase == "probing"
    drive(pol, comm, range(14, 20), grown)
    assert pol.phase == "decided" and "extra.weight" in pol.decisions
    assert [e["event"] for e in pol.log if e["event"].startswith("decided")][-1] == \
        "decided (new layers measured)"


def test_a_restored_policy_resumes_in_its_phase(tmp_path) -> None:
    pol, comm = policy(tmp_path, cache=False), Ranks()
    drive(pol, comm, range(2), model())
    assert pol.phase == "probing"
    again = policy(tmp_path, cache=False)
    again.load_state_dict(pol.state_dict())
    assert again.phase == "probing"


def test_per_candidate_is_a_named_view_of_the_rows() -> None:
    rows = np.zeros((3, columns.width(2)))
    columns.per_candidate(rows)[:, 1, columns.BYTES] = 7.0
    assert rows[0, 1 + columns.PER_CANDIDATE + columns.BYTES] == 7.0
    assert columns.per_candidate(rows[0]).shape == (2, columns.PER_CANDIDATE)


def test_tunables_are_validated_and_kept_out_of_specs() -> None:
    assert AutoConfig().tunables == Tunables()
    assert AutoPolicy(tunables=Tunables(shift=0.2)).config.tunables.shift == 0.2
    for bad in ({"shift": 0}, {"shift": 1.5}, {"repeats": 2.5}, {"skip": -1}, {"beta2": 1.0}):
        with pytest.raises(ValueError, match="tunables"):
            Tunables(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tunables"):
        AutoConfig(tunables={"shift": 0.1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tunables is an object"):
        as_policy("auto:tunables=1")

"""Session setup: the automatic policy's measurement cache goes to a temporary directory."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config) -> None:
    # Never the user's ~/.cache; ranks launched by the tests inherit the variable.
    path = tempfile.mkdtemp(prefix="compcoll-cache-")
    os.environ["COMPCOLL_CACHE_DIR"] = path
    config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))


class _StoppedClock:
    """A clock that never moves: every step the policy's trial times lasts 0 s."""

    @staticmethod
    def perf_counter() -> float:
        return 0.0


@pytest.fixture(autouse=True)
def _trial_without_machine_timing(monkeypatch) -> None:
    """The automatic policy's timed trial reads step times of this machine; in process, its
    outcome is pinned (equal times: the plan is kept), so no test depends on how fast this
    machine ran. tests/test_policy_trial.py sets the step times it checks."""
    from collectives.policy import trial

    monkeypatch.setattr(trial, "time", _StoppedClock())

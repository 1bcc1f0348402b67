"""The compcoll torch.distributed backend's configuration: bad values are refused by the name
of their environment variable, when a group is created, and never break ``import torch``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta

import pytest

import collectives.backend
from collectives.backend import BackendConfig, configure

_BACKEND_VARS = ("COMPCOLL_COMPRESSOR", "COMPCOLL_FEEDBACK", "COMPCOLL_MIN_NUMEL",
                 "COMPCOLL_FEEDBACK_MAX_TENSORS")


@pytest.fixture
def clean_env(monkeypatch):
    """No backend variable set; what configure sets is undone after the test."""
    for var in _BACKEND_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(collectives.backend, "_config", None)
    return monkeypatch


def test_environment_is_read_and_checked(clean_env) -> None:
    clean_env.setenv("COMPCOLL_COMPRESSOR", "uniform:bits=4")
    clean_env.setenv("COMPCOLL_FEEDBACK", "1")
    clean_env.setenv("COMPCOLL_MIN_NUMEL", "100")
    clean_env.setenv("COMPCOLL_FEEDBACK_MAX_TENSORS", "8")
    cfg = BackendConfig.from_env()
    assert (cfg.compressor, cfg.feedback, cfg.min_numel, cfg.feedback_max_tensors) == \
        ("uniform:bits=4", True, 100, 8)
    assert BackendConfig().feedback_max_tensors == 64


@pytest.mark.parametrize("var,value,words", [
    ("COMPCOLL_FEEDBACK", "maybe", "COMPCOLL_FEEDBACK='maybe': use 1/0"),
    ("COMPCOLL_MIN_NUMEL", "lots", "COMPCOLL_MIN_NUMEL='lots': use a whole number >= 0"),
    ("COMPCOLL_MIN_NUMEL", "-3", "COMPCOLL_MIN_NUMEL='-3': use a whole number >= 0"),
    ("COMPCOLL_COMPRESSOR", "bogus", "COMPCOLL_COMPRESSOR='bogus': unknown compressor"),
    ("COMPCOLL_COMPRESSOR", "uniform:bits=99", "COMPCOLL_COMPRESSOR='uniform:bits=99': "),
    ("COMPCOLL_FEEDBACK_MAX_TENSORS", "0", "COMPCOLL_FEEDBACK_MAX_TENSORS='0': use a whole"),
])
def test_bad_environment_is_refused_by_name(clean_env, var, value, words) -> None:
    clean_env.setenv(var, value)
    with pytest.raises(ValueError) as info:
        BackendConfig.from_env()
    assert str(info.value).startswith(words), str(info.value)


@pytest.mark.parametrize("kwargs,words", [
    ({"min_numel": -1}, "configure(min_numel=-1), the setting of COMPCOLL_MIN_NUMEL: use a"),
    ({"compressor": "bogus"}, "configure(compressor='bogus'), the setting of "
                              "COMPCOLL_COMPRESSOR: unknown compressor"),
    ({"feedback": "yes"}, "configure(feedback='yes'), the setting of COMPCOLL_FEEDBACK: use "
                          "True or False"),
    ({"feedback_max_tensors": 0}, "configure(feedback_max_tensors=0), the setting of "
                                  "COMPCOLL_FEEDBACK_MAX_TENSORS"),
])
def test_configure_names_the_argument_and_its_variable(clean_env, kwargs, words) -> None:
    with pytest.raises(ValueError) as info:
        configure(**kwargs)
    assert str(info.value).startswith(words), str(info.value)


def test_configure_overrides_the_environment(clean_env) -> None:
    clean_env.setenv("COMPCOLL_MIN_NUMEL", "100")
    cfg = configure("sign", feedback_max_tensors=5)
    assert (cfg.compressor, cfg.min_numel, cfg.feedback_max_tensors) == ("sign", 100, 5)
    assert configure(min_numel=0).min_numel == 0


def test_a_config_built_by_hand_is_checked_by_name() -> None:
    with pytest.raises(ValueError, match=r"min_numel=-5 \(the setting of COMPCOLL_MIN_NUMEL\)"):
        BackendConfig(min_numel=-5).checked()
    assert BackendConfig().checked() == BackendConfig()


_PROBE = """
import torch  # loads the backend's entry point: must not fail
import torch.distributed as dist
print("imported, registered:", "COMPCOLL" in dist.Backend._plugins, flush=True)
from datetime import timedelta
from collectives.backend import create
try:
    create(dist.HashStore(), 0, 1, timedelta(seconds=10))
    print("created")
except ValueError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("var,value", [
    ("COMPCOLL_TIMEOUT", "abc"), ("COMPCOLL_VALIDATE", "maybe"),
    ("COMPCOLL_SEGMENT_BYTES", "abc"), ("COMPCOLL_MIN_NUMEL", "abc"),
    ("COMPCOLL_COMPRESSOR", "bogus"), ("COMPCOLL_FEEDBACK", "maybe"),
    ("COMPCOLL_FEEDBACK_MAX_TENSORS", "none"), ("COMPCOLL_POLL_SPINS", "abc"),
    ("COMPCOLL_POLL_YIELDS", "1e3"), ("COMPCOLL_POLL_SPINS", "-1"),
])
def test_a_bad_variable_never_breaks_import_torch_and_is_refused_at_group_creation(
        var, value) -> None:
    env = {**os.environ, var: value, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    res = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "imported, registered: True" in res.stdout, res.stdout + res.stderr[-3000:]
    assert f"refused: {var}={value!r}" in res.stdout, res.stdout


@pytest.fixture
def fresh_polling(monkeypatch):
    """The polling counts read again from the environment (and again after the test)."""
    from collectives.transport import waiting

    for var in waiting.POLL_DEFAULTS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(waiting, "_poll", None)
    yield monkeypatch
    waiting._poll = None


def test_polling_counts_are_whole_numbers_read_on_first_use(fresh_polling) -> None:
    from collectives.transport.waiting import POLL_DEFAULTS, poll_settings

    assert poll_settings() == tuple(POLL_DEFAULTS.values()) == (32, 2000)
    import collectives.transport.waiting as waiting

    waiting._poll = None
    fresh_polling.setenv("COMPCOLL_POLL_SPINS", " 0 ")
    fresh_polling.setenv("COMPCOLL_POLL_YIELDS", "10")
    assert poll_settings() == (0, 10)


@pytest.mark.parametrize("var,value", [
    ("COMPCOLL_POLL_SPINS", "abc"), ("COMPCOLL_POLL_SPINS", "-5"),
    ("COMPCOLL_POLL_YIELDS", "1e3"), ("COMPCOLL_POLL_YIELDS", "2.5"),
])
def test_a_bad_polling_count_is_refused_by_name_when_a_communicator_is_made(
        fresh_polling, var, value) -> None:
    import torch.distributed as dist

    from collectives.transport.torch_dist import ProcessGroupCommunicator
    from collectives.transport.waiting import poll_settings

    fresh_polling.setenv(var, value)
    words = f"{var}={value!r}: use a whole number >= 0"
    with pytest.raises(ValueError, match=re.escape(words)):
        poll_settings()
    pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=10))
    with pytest.raises(ValueError, match=re.escape(words)):
        ProcessGroupCommunicator(pg)


@pytest.mark.parametrize("var,value", [("LOCAL_RANK", "x"), ("RANK", "1e3"),
                                       ("GROUP_RANK", "-1")])
def test_a_bad_torchrun_rank_variable_is_refused_by_name_at_group_creation(
        clean_env, var, value) -> None:
    import torch.distributed as dist

    from collectives.backend import create

    for name, given in {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "RANK": "1",
                        "GROUP_RANK": "", var: value}.items():
        clean_env.setenv(name, given)
    clean_env.delenv("COMPCOLL_HOST", raising=False)
    with pytest.raises(ValueError, match=re.escape(f"{var}={value!r} is not a rank")):
        create(dist.HashStore(), 0, 1, timedelta(seconds=10))

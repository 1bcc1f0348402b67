"""The compcoll torch.distributed backend's configuration: bad values are refused by name."""

from __future__ import annotations

import pytest

from collectives.backend import BackendConfig, configure


def test_environment_is_read_and_checked(monkeypatch) -> None:
    monkeypatch.setenv("COMPCOLL_COMPRESSOR", "uniform:bits=4")
    monkeypatch.setenv("COMPCOLL_FEEDBACK", "1")
    monkeypatch.setenv("COMPCOLL_MIN_NUMEL", "100")
    cfg = BackendConfig.from_env()
    assert (cfg.compressor, cfg.feedback, cfg.min_numel) == ("uniform:bits=4", True, 100)


@pytest.mark.parametrize("var,value,words", [
    ("COMPCOLL_FEEDBACK", "maybe", "COMPCOLL_FEEDBACK must be 0 or 1"),
    ("COMPCOLL_MIN_NUMEL", "lots", "COMPCOLL_MIN_NUMEL must be an integer"),
    ("COMPCOLL_COMPRESSOR", "bogus", "bogus"),
])
def test_bad_environment_is_refused_by_name(monkeypatch, var, value, words) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises((ValueError, KeyError), match=words):
        BackendConfig.from_env()


def test_configure_overrides_and_checks(monkeypatch) -> None:
    for var in ("COMPCOLL_COMPRESSOR", "COMPCOLL_FEEDBACK", "COMPCOLL_MIN_NUMEL"):
        monkeypatch.delenv(var, raising=False)
    assert configure("sign", min_numel=0).compressor == "sign"
    with pytest.raises(ValueError, match="min_numel must be an integer >= 0"):
        configure(min_numel=-1)
    configure()  # back to the defaults for whatever runs next in this process

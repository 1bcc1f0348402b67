"""Process-wide defaults: read from the environment at first use (never at import), checked,
and an error names the variable it came from."""

from __future__ import annotations

import subprocess
import sys

import pytest

import collectives
from collectives import config

BAD = [
    ("COMPCOLL_TIMEOUT", "abc", "timeout"),
    ("COMPCOLL_TIMEOUT", "0", "timeout"),
    ("COMPCOLL_VALIDATE", "maybe", "validate"),
    ("COMPCOLL_SEGMENT_BYTES", "abc", "segment_bytes"),
    ("COMPCOLL_SEGMENT_BYTES", "0", "segment_bytes"),
    ("COMPCOLL_SEGMENT_BYTES", "-4096", "segment_bytes"),
    ("COMPCOLL_COMPRESSED_SEGMENT_BYTES", "-1", "compressed_segment_bytes"),
    ("COMPCOLL_TUNE", "sometimes", "tune"),
]


@pytest.mark.parametrize(("variable", "value", "attr"), BAD)
def test_a_bad_value_is_refused_at_first_use_naming_the_variable(monkeypatch, variable, value,
                                                                 attr) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=variable):
        config.from_env(attr)


def test_importing_with_bad_values_works_and_the_first_use_names_the_variable() -> None:
    env = {"COMPCOLL_TIMEOUT": "abc", "COMPCOLL_SEGMENT_BYTES": "0", "PATH": "/usr/bin"}
    code = ("import collectives\n"
            "try:\n    collectives.defaults.segment_bytes\nexcept ValueError as e:\n"
            "    print('refused:', e)\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "refused: COMPCOLL_SEGMENT_BYTES='0'" in res.stdout


@pytest.mark.parametrize(("attr", "value"), [("segment_bytes", 0), ("segment_bytes", -1),
                                             ("segment_bytes", 1.5), ("validate", "yes"),
                                             ("compressed_segment_bytes", -4),
                                             ("timeout", 0), ("timeout", None)])
def test_a_bad_value_set_in_code_is_refused_and_the_old_one_kept(attr, value) -> None:
    before = getattr(collectives.defaults, attr)
    with pytest.raises((TypeError, ValueError), match=f"collectives.defaults.{attr}"):
        setattr(collectives.defaults, attr, value)
    assert getattr(collectives.defaults, attr) == before


def test_unknown_settings_are_named() -> None:
    with pytest.raises(AttributeError, match="segment_bytes"):
        collectives.defaults.segment = 4  # type: ignore[attr-defined]


def test_the_settings_compared_across_ranks_name_their_variables() -> None:
    names = " ".join(config.shaping())
    for variable in ("COMPCOLL_VALIDATE", "COMPCOLL_SEGMENT_BYTES",
                     "COMPCOLL_COMPRESSED_SEGMENT_BYTES", "COMPCOLL_TUNE"):
        assert variable in names

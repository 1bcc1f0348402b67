"""``import compcoll``: the distribution's name as an import name, a thin front for
``collectives`` and ``compressors`` that loads torch only when a torch integration is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import collectives
import compcoll
import compressors


def test_every_public_name_of_collectives_is_the_same_object() -> None:
    names = list(collectives.__all__)
    assert set(names) <= set(compcoll.__all__)
    assert [n for n in compcoll.__all__ if n not in names] == [
        "compressors", "ddp", "fsdp", "backend", "lightning", "policy", "optim"]
    for name in names:
        assert getattr(compcoll, name) is getattr(collectives, name), name


def test_the_compressors_are_the_compressors_package() -> None:
    assert compcoll.compressors is compressors
    for name in compressors.__all__:
        assert getattr(compcoll.compressors, name) is getattr(compressors, name)
    assert "compressors" in dir(compcoll) and "ddp" in dir(compcoll)


def test_subpackages_are_the_library_s_own() -> None:
    import collectives.policy

    assert compcoll.policy is collectives.policy
    with pytest.raises(AttributeError, match="no attribute 'bogus'"):
        compcoll.bogus  # noqa: B018


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd="/")  # the installed package, not this folder


def test_import_compcoll_needs_no_torch_until_a_torch_part_is_used() -> None:
    code = ("import sys; sys.modules['torch'] = None  # as if torch were not installed\n"
            "import numpy as np, compcoll\n"
            "print(compcoll.__file__)\n"
            "print(compcoll.allreduce(np.arange(4, dtype=np.float32)).tolist())\n"
            "print(compcoll.policy.AutoConfig().cache)\n"
            "try:\n"
            "    compcoll.ddp\n"
            "except ImportError:\n"
            "    print('ddp needs torch')\n")
    out = _python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("compcoll/__init__.py")
    assert lines[1:] == ["[0.0, 1.0, 2.0, 3.0]", "True", "ddp needs torch"]


def test_ddp_through_compcoll_is_the_hook() -> None:
    pytest.importorskip("torch")
    import collectives.ddp

    assert compcoll.ddp is collectives.ddp
    assert compcoll.ddp.compression_hook is collectives.ddp.compression_hook

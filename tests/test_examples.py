"""Docstring examples: every public function and class has one, and each runs as written
(compressors' in this process, collectives' on 2 MPI ranks)."""

from __future__ import annotations

import pytest

from tests.examples_util import PACKAGES, example, public, run
from tests.mpirun import LAUNCHES, Script, passed

LAUNCHES.add(Script("examples.py", 2, timeout=180))
EVERY = {name: obj for module in PACKAGES.values() for name, obj in public(module).items()}


@pytest.mark.parametrize("name", sorted(EVERY))
def test_every_public_function_and_class_has_an_example(name: str) -> None:
    assert example(EVERY[name]) is not None, f"{name}'s docstring has no Example:: block"


@pytest.mark.parametrize("name", sorted(public(PACKAGES["compressors"])))
def test_compressor_examples_run(name: str) -> None:
    code = example(EVERY[name])
    if code is None:
        pytest.skip("no example (the test above fails for it)")
    run(code)


@pytest.mark.mpi
def test_collectives_examples_run_on_two_ranks() -> None:
    passed(LAUNCHES.result("examples.py", 2), "docstring examples")

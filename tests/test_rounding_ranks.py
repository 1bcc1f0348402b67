"""Stochastic rounding draws independently on each rank; shared choices stay shared."""

from __future__ import annotations

import numpy as np
import pytest

import compressors
from tests.mpirun import LAUNCHES, Script, passed

LAUNCHES.add(Script("rounding_ranks.py", 3, timeout=240))
STOCHASTIC = ["uniform:bits=8", "uniform:bits=2", "qsgd", "terngrad"]


def _x(n: int = 1 << 16) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("spec", STOCHASTIC)
def test_stochastic_rounding_seeds_differ_by_rank(spec: str) -> None:
    comp = compressors.get(spec)
    assert not comp.capabilities.needs_shared_seed
    seeds = {comp.draw_seed("w", 3, rank) for rank in range(4)}
    assert len(seeds) == 4
    # rank 0 draws as a call without a rank (a single process is unchanged)
    assert comp.draw_seed("w", 3, 0) == compressors.derive_seed(0, "w", 3)
    a, b = (comp.compress(_x(), name="w", step=3, rank=r) for r in (0, 1))
    assert not np.array_equal(a.buffers["codes"], b.buffers["codes"])


def test_shared_choices_ignore_the_rank() -> None:
    comp = compressors.get("randomk:ratio=0.1")
    assert comp.capabilities.needs_shared_seed
    assert len({comp.draw_seed("w", 3, rank) for rank in range(4)}) == 1
    a, b = (comp.compress(_x(), name="w", step=3, rank=r) for r in (0, 1))
    assert a.buffers["key"][0] == b.buffers["key"][0]  # the same indices on every rank
    # PowerSGD's first Q comes from (seed, name) alone: the same payload on any rank
    m = _x(64 * 32).reshape(64, 32)
    p0, p1 = (compressors.get("powersgd:rank=2").compress(m, name="m", step=0, rank=r)
              for r in (0, 1))
    assert all(np.array_equal(p0.buffers[k], p1.buffers[k]) for k in p0.buffers)


def test_derive_seed_adds_the_rank() -> None:
    assert compressors.derive_seed(0, "w", 1, 2) != compressors.derive_seed(0, "w", 1, 3)
    assert compressors.derive_seed(0, "w", 1, 0) == compressors.derive_seed(0, "w", 1)
    with pytest.raises(ValueError, match="rank"):
        compressors.derive_seed(0, "w", 1, -1)


@pytest.mark.parametrize("spec", ["uniform:bits=8", "topk:ratio=0.1"])
def test_the_fused_feedback_path_draws_as_compress(spec: str) -> None:
    comp, x = compressors.get(spec), _x(4096)
    for rank in (0, 2):
        res = np.random.default_rng(1).standard_normal(x.size).astype(np.float32) * 0.1
        plain = comp.compress(x + res, name="w", step=5, rank=rank)
        fused = comp.compress_feedback(x, res.copy(), name="w", step=5, rank=rank)
        assert all(np.array_equal(plain.buffers[k], fused.buffers[k]) for k in plain.buffers)


@pytest.mark.parametrize("spec", ["uniform:bits=2", "uniform:bits=8"])
def test_the_average_of_ranks_rounding_errors_falls_with_the_ranks(spec: str) -> None:
    # p ranks quantize the same tensor: with independent draws the error of their average
    # falls as 1/sqrt(p) (0.5 at p=4); with the same draws on every rank it would stay 1.
    comp, x = compressors.get(spec), _x(1 << 17)

    def error(p: int) -> float:
        mean = np.mean([comp.decompress(comp.compress(x, name="w", step=0, rank=r))
                        for r in range(p)], axis=0, dtype=np.float64)
        return float(np.sqrt(np.mean(np.square(mean - x))))

    e1, e4 = error(1), error(4)
    assert e1 > 0 and e4 <= 0.7 * e1, (e1, e4)


@pytest.mark.mpi
def test_ranks_results_bit_identical_and_rounding_errors_average_out() -> None:
    passed(LAUNCHES.result("rounding_ranks.py", 3), "rounding_ranks")

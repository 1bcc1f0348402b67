"""The compcoll backend's group in one process (a single-rank gloo group inside): bounded
error-feedback state, refused integer averages."""

from __future__ import annotations

import warnings
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from collectives.backend import BackendConfig, CompressedProcessGroup


@pytest.fixture
def group():
    made = []

    def make(**config) -> CompressedProcessGroup:
        pg = CompressedProcessGroup(dist.HashStore(), 0, 1, timedelta(seconds=30),
                                    BackendConfig(**config).checked())
        made.append(pg)
        return pg

    yield make
    for pg in made:
        pg.shutdown()


def _avg(kind=dist.AllreduceOptions):  # noqa: ANN001, ANN202
    opts = kind()
    opts.reduceOp = dist.ReduceOp.AVG
    return opts


def test_feedback_keeps_at_most_the_stated_number_of_residuals_and_warns_once(group) -> None:
    pg = group(feedback=True, min_numel=0, feedback_max_tensors=3)
    first = torch.randn(1000)
    pg.allreduce([first]).wait()
    fresh = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(8):
            fresh.append(torch.randn(1000 + i % 2))  # alive: every one at a new address
            pg.allreduce([fresh[-1]]).wait()
            pg.allreduce([first]).wait()  # used every time: never the least recent
    held = pg.session.scopes()  # the session's store: one scope per buffer, oldest first
    assert len(held) == 3 and pg.session.evicted == 6
    assert f"1000:{first.dtype}#0" in held  # the first buffer of its size: slot 0
    ours = [w for w in caught if "COMPCOLL_FEEDBACK_MAX_TENSORS" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    text = str(ours[0].message)
    assert "at most 3 tensors" in text and "COMPCOLL_FEEDBACK=0" in text
    assert pg.compressed == 17


def test_without_feedback_no_residual_is_kept(group) -> None:
    pg = group(min_numel=0)
    for _ in range(5):
        pg.allreduce([torch.randn(500)]).wait()
    assert not list(pg.session.feedbacks()) and pg.compressed == 5


def test_average_of_integers_is_refused_like_gloo(group) -> None:
    pg = group(min_numel=0)
    t = torch.full((4,), 5, dtype=torch.int64)
    with pytest.raises(ValueError, match="AVG needs floating-point tensors, got torch.int64"):
        pg.allreduce([t], _avg())
    with pytest.raises(ValueError, match="reduce_scatter_tensor with ReduceOp.AVG"):
        pg.reduce_scatter_single(torch.empty(4, dtype=torch.int32),
                                 torch.ones(4, dtype=torch.int32),
                                 _avg(dist.ReduceScatterOptions))
    f = torch.full((4,), 5.0)
    pg.allreduce([f], _avg()).wait()
    assert torch.equal(f, torch.full((4,), 5.0)) and torch.equal(t, torch.full((4,), 5))

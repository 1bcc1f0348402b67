"""NaN and Inf through every compressor: the bad step shows them, later steps are finite again.

A GradScaler skips a step when any gradient element is NaN or Inf, so the decoded output of
the bad step must hold one; and neither error feedback nor warm starts may carry them on.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors
from compressors import DGCFeedback, ErrorFeedback, NoErrorFeedback
from compressors.randomk import nonfinite_marker

from .helpers import CONFIGS, gaussian

SPECS = {**{k: (k, v) for k, v in CONFIGS.items()},
         "topk-approx": ("topk", {"ratio": 0.1, "approximate": True}),
         "randomk-rescale": ("randomk", {"ratio": 0.05, "rescale": True})}
FEEDBACK = {"none": None, "ef": ErrorFeedback, "no-ef": NoErrorFeedback, "dgc": DGCFeedback}
BAD = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
DTYPES = ["float32", "float16", "bfloat16", "float64"]


def _grad(step: int, dtype: str, bad: float | None) -> torch.Tensor:
    g = torch.from_numpy(gaussian((40, 30), seed=step))
    if bad is not None:
        g[7, 3] = bad  # one element: a sparsifier would keep it only by chance
    return g.to(getattr(torch, dtype))


def _run(spec: str, fb: str, dtype: str, bad: float, fused: bool = False) -> list[torch.Tensor]:
    name, params = SPECS[spec]
    comp = compressors.get(name, **params)
    ef = FEEDBACK[fb](comp) if FEEDBACK[fb] else None
    outs = []
    for step in range(4):
        g = _grad(step, dtype, bad if step == 1 else None)
        if ef is None:
            payload = comp.compress(g, name="w", step=step)
        elif fused and comp.fuses_feedback and dtype == "float32":
            payload = comp.compress_feedback(g.numpy(), ef.residual_for("w", g.numel()),
                                             name="w", step=step)
        else:
            payload = ef.step(g, "w", step)
        outs.append(comp.decompress(payload))
    return outs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fb", sorted(FEEDBACK))
@pytest.mark.parametrize("spec", sorted(SPECS))
def test_bad_step_shows_nonfinite_then_recovers(spec: str, fb: str, dtype: str) -> None:
    for label, bad in BAD.items():
        outs = _run(spec, fb, dtype, bad)
        finite = [bool(torch.isfinite(y.float()).all()) for y in outs]
        assert finite == [True, False, True, True], f"{spec}/{fb}/{dtype} {label}: {finite}"


@pytest.mark.parametrize("spec", ["topk", "topk-approx", "threshold"])
def test_fused_feedback_kernels_show_nonfinite_then_recover(spec: str) -> None:
    outs = _run(spec, "ef", "float32", np.nan, fused=True)
    assert [bool(np.isfinite(y).all()) for y in outs] == [True, False, True, True]


def test_randomk_marker_keeps_the_kind_of_overflow() -> None:
    comp = compressors.get("randomk", ratio=0.01)
    for bad, check in ((np.inf, np.isposinf), (-np.inf, np.isneginf), (np.nan, np.isnan)):
        x = gaussian(1000)
        x[500] = bad
        y = comp.decompress(comp.compress(x, name="w", step=0))
        assert check(y).sum() == 1 and np.isfinite(y).sum() == 999
    x = gaussian(1000)
    x[[3, 9]] = [np.inf, -np.inf]  # opposite infinities: no single one stands for both
    assert np.isnan(nonfinite_marker(x, "float32")).all()
    assert nonfinite_marker(np.full(1000, 3e37, np.float32), "float32") is None  # sum: inf


def test_randomk_sums_show_one_rank_overflow() -> None:
    """Summable payloads: one rank's marker survives the value-by-value sum."""
    comp = compressors.get("randomk", ratio=0.02)
    xs = [gaussian(500, seed=s) for s in range(3)]
    xs[1][123] = np.inf
    pays = [comp.compress(x, name="w", step=4) for x in xs]
    total = pays[0]
    total.buffers["values"] = sum(p.buffers["values"] for p in pays)
    assert np.isinf(comp.decompress(total)).any()


def test_powersgd_warm_start_survives_a_nan_step() -> None:
    """Two ranks drive the collective steps; rank 0 has one NaN at step 1."""
    ranks = [compressors.get("powersgd", rank=2) for _ in range(2)]
    for step in range(4):
        grads = [gaussian((24, 16), seed=10 * step + r) for r in range(2)]
        if step == 1:
            grads[0][3, 4] = np.nan
        ps, ctxs = zip(*[c.p_step(g, "w", g.shape, "float32")
                         for c, g in zip(ranks, grads, strict=True)], strict=True)
        qs = [c.q_step(ctx, ps[0] + ps[1]) for c, ctx in zip(ranks, ctxs, strict=True)]
        outs = [c.reconstruct(ctx, qs[0] + qs[1], "w") for c, ctx in zip(ranks, ctxs, strict=True)]
        for out in outs:
            assert bool(np.isfinite(out).all()) == (step != 1), f"step {step}"
        for c in ranks:
            assert np.isfinite(c.warm_q("w", 16, 2)).all()


def test_powersgd_overflowing_q_is_not_kept() -> None:
    comp = compressors.get("powersgd", rank=1)
    comp.compress(gaussian((30, 20)), name="w", step=0)
    kept = comp.warm_q("w", 20, 1).copy()
    huge = np.full((30, 20), 3e38, np.float32)  # finite, but M^T P overflows float32
    with np.errstate(over="ignore", invalid="ignore"):
        comp.compress(huge, name="w", step=1)
    fresh = compressors.get("powersgd", rank=1).warm_q("w", 20, 1)
    assert not np.array_equal(comp.warm_q("w", 20, 1), kept)
    np.testing.assert_array_equal(comp.warm_q("w", 20, 1), fresh)  # back to the seeded Q

"""The accuracy criterion a decision bounds: each candidate's error on each layer.

Under ``optimizer="sgd"`` the error is relative in the gradient's norm: ||g_sent - g|| /
||g||, weighed in the step's total by the layer's share of the squared gradient norm (moved
to the live shares the hook reports). Under ``optimizer="adam"`` (the default) it is measured
in Adam's preconditioned space (``moments``): the same ratio with every coordinate divided by
the root of its running second moment, weighed by the layer's share of the preconditioned
gradient's squared norm (the step Adam takes, whose size does not follow the raw gradient's,
so the live shares do not move it); error feedback's residual is measured there too.

A compressor below 16 bits a value may be used for a layer only where that error is bounded:
never for a layer profiled without a gradient (no statistics), nor where it sends something
on a coordinate whose second moment is zero (Adam would take a full step there out of
nothing). 16-bit formats and the identity are always allowed: their error is rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import compressors

from . import columns as col

#: Compressors that send at least 16 bits a value: never ruled out by the criterion.
SIXTEEN = frozenset({"none", "fp16", "bf16"})


def sixteen(spec: str) -> bool:
    """Whether ``spec`` sends 16 bits a value or more (its error is rounding)."""
    return compressors.get(spec).name in SIXTEEN


@dataclass
class Criterion:
    """Per layer: each candidate's error (``rel``), residual growth in steps of gradient,
    whether its error cannot be bounded, and why not (None where it can); ``norms`` weigh
    the layers in the step's total, ``live``: whether the live bucket shares move them."""

    name: str
    rel: np.ndarray
    residual: np.ndarray
    unbounded: np.ndarray
    blocked: list[str | None]
    norms: np.ndarray
    live: bool


def measure(optimizer: str, cands: tuple[str, ...], rows: np.ndarray) -> Criterion:
    """The criterion of ``optimizer`` ("adam" or "sgd") on the table ``rows``."""
    cols = col.per_candidate(rows)
    plain = np.sqrt(cols[:, :, col.ERR] / np.maximum(cols[:, :, col.SQ], 1e-300))
    if optimizer == "sgd":
        none = np.zeros(plain.shape, dtype=bool)
        return Criterion("error", plain, np.sqrt(cols[:, :, col.RESIDUAL]), none,
                         [None] * len(rows), rows[:, col.NORM].copy(), True)
    sq = cols[:, :, col.ADAM_SQ]
    adam = np.sqrt(cols[:, :, col.ADAM_ERR] / np.maximum(sq, 1e-300))
    norms = sq.max(axis=1)  # the same gradient under every candidate
    stats = norms > 0
    zero_v = cols[:, :, col.UNBOUNDED] > 0
    wide = np.array([sixteen(s) for s in cands])
    unbounded = ~wide & (zero_v | ~stats[:, None])
    # 16 bits: the error measured where it is bounded, else its (rounding) error in norm.
    rel = np.where(wide & ~(stats[:, None] & ~zero_v), plain, adam)
    blocked = [None if not any(u) else "no gradient statistics" if not s else
               "it sends where Adam's second moment is zero"
               for u, s in zip(unbounded, stats, strict=True)]
    return Criterion("Adam-scaled error", rel, np.sqrt(cols[:, :, col.ADAM_RESIDUAL]),
                     unbounded, blocked, norms, False)

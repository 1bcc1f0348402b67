"""AutoConfig: the automatic policy's hyperparameters (validated, frozen)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import MIN_NUMEL
from .base import canonical
from .tunables import DEFAULTS, Tunables

DEFAULT_CANDIDATES = ("none", "fp16", "uniform:bits=8", "uniform:bits=4", "topk:ratio=0.01",
                      "powersgd:rank=4")


@dataclass(frozen=True)
class AutoConfig:
    """Hyperparameters of :class:`AutoPolicy` (validated)."""

    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    max_error: float = 0.25
    #: Steps between decisions after the first; a decision after the first prices the
    #: standing measurements with the cost model and the live gradient statistics (no
    #: profiling, no pause).
    every: int = 100
    first: int = 2
    #: Steps each bucket is profiled for, one bucket after another: enough for a residual
    #: that keeps growing to show it (see ``max_residual``).
    probe_steps: int = 5
    #: Convergence, not per-step error: a compressor whose error-feedback residual at the
    #: end of the probe steps is more than this many times the step's gradient (in norm) is
    #: not used for the layer. A bounded residual is sent a step or two late; a growing one
    #: (top-k on a dense layer, low rank on an embedding table) withholds ever more of the
    #: update, which per-step relative error does not show.
    max_residual: float = 1.0
    window: int = 25
    threshold: float = 0.5
    bins: int = 256
    #: What layers of at least ``min_numel`` elements send until the first decision (while
    #: profiling): the strong baseline's own choice, so those steps never cost more than
    #: PyTorch's fp16 hook (None: fp16 when it is a candidate, else none). Smaller layers
    #: send "none".
    initial: str | None = None
    #: Seconds below which a predicted gain is timing noise: a layer's option must beat
    #: every option of lower error by more than this to be considered (on a tie the lower
    #: error wins), and regrouping a bucket must save more than this.
    min_gain: float = 2e-6
    #: The share of the predicted time a candidate of more error must save to be taken (over
    #: a plan of less error, and over the last decision when deciding again): timing on shared
    #: cores varies by tens of percent from run to run, and a smaller gain would flip
    #: decisions. A prediction only: the trial times the plan below 16 bits beside it and
    #: keeps what the steps show (``trial_steps``).
    margin: float = 0.1
    #: Layers smaller than this are sent uncompressed and never profiled: 16384 float32
    #: elements are 64 KiB, under a millisecond at 1 Gbit/s, so compressing them saves less
    #: than the codec and timing noise cost, and their few bytes ride in their bucket's
    #: uncompressed collective (biases, norm scales, small heads).
    min_numel: int = MIN_NUMEL
    #: Keep the measurements on disk (see ``collectives.policy.cache``): a later run of the
    #: same model, world size and link decides at its first step without profiling.
    cache: bool = True
    #: The cache's directory (None: ``$COMPCOLL_CACHE_DIR`` or ``~/.cache/compcoll/policy``);
    #: it also keeps this machine's codec speeds (``machine``), for any model.
    cache_dir: str | None = None
    #: A name for the link in the cache key (None: the engine and the decade of the fitted
    #: cost model's alpha and beta).
    link: str | None = None
    #: How the optimizer uses the gradient, which decides what a compressor's error costs.
    #: "adam": Adam, AdamW, Adagrad, RMSprop and their kin divide each coordinate by its
    #: running RMS, so noise on a small coordinate moves its weight as much as a large
    #: coordinate's gradient would: errors are measured in that preconditioned space
    #: (``moments``), and a layer where they cannot be bounded sends 16 bits. "sgd" (with or
    #: without momentum): the update follows the gradient, and relative error in its norm
    #: is the measure.
    optimizer: str = "adam"
    #: Gradient elements a profiling step hands to the profiler, over all its layers, and four
    #: times the sampled elements it codes under every candidate (``probing``): the layers
    #: are spread over more steps when they hold more (a layer over it is profiled alone).
    profile_elements_per_step: int = 1 << 22
    #: The loss check (``quality``, fed by ``observe_loss``): steps per window of the
    #: training loss compared before and after a decision that compresses below 16 bits
    #: (0: no check).
    loss_window: int = 50
    #: The check falls back to 16 bits when the loss rises, or falls by less than this share
    #: of its fall per step in the window before the decision.
    loss_ratio: float = 0.5
    #: Reported steps each window needs for the check (fewer: no check).
    loss_samples: int = 10
    #: Steps a decision is timed for, and as many for each plan beside it (its layers below
    #: 16 bits at 16, its layers of 16 bits below 16 within the budget, every layer
    #: uncompressed), the plans taking turns; a plan of more error is kept only where its
    #: median step is clearly faster (``trial``: by twice the measured noise and 3% at
    #: least). 0 trusts the prediction.
    trial_steps: int = 12
    #: The numbers below these settings, each with the reason for its default (``tunables``):
    #: set in code (``AutoConfig(tunables=Tunables(shift=0.1))``), not in a spec string.
    tunables: Tunables = DEFAULTS

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("AutoPolicy needs at least one candidate compressor")
        object.__setattr__(self, "candidates", tuple(canonical(c) for c in self.candidates))
        if self.initial is None:
            object.__setattr__(self, "initial", "fp16" if "fp16" in self.candidates else "none")
        object.__setattr__(self, "initial", canonical(self.initial))
        if "none" not in self.candidates:
            raise ValueError("AutoPolicy's candidates must include 'none' (the error-free "
                             "choice that keeps every budget feasible)")
        if not (0 <= self.max_error < math.inf):
            raise ValueError(f"max_error must be a finite number >= 0, got {self.max_error}")
        if not (isinstance(self.min_numel, int) and self.min_numel >= 0):
            raise ValueError(f"min_numel must be an integer >= 0, got {self.min_numel!r}")
        for key in ("every", "probe_steps", "window", "bins"):
            if not (isinstance(getattr(self, key), int) and getattr(self, key) >= 1):
                raise ValueError(f"{key} must be an integer >= 1, got {getattr(self, key)!r}")
        if not (isinstance(self.first, int) and self.first >= 0):
            raise ValueError(f"first must be an integer >= 0, got {self.first!r}")
        if not 0 < self.max_residual <= math.inf:
            raise ValueError(f"max_residual must be > 0 (inf: no bound), got "
                             f"{self.max_residual}")
        if self.initial not in self.candidates:
            raise ValueError(f"initial {self.initial!r} must be one of the candidates "
                             f"{list(self.candidates)}")
        if not self.min_gain >= 0:
            raise ValueError(f"min_gain must be >= 0 seconds, got {self.min_gain}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"margin must be a share in [0, 1), got {self.margin}")
        if not self.threshold > 0:
            raise ValueError(f"threshold must be > 0, got {self.threshold}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' (Adam, AdamW, Adagrad-like: each "
                             f"coordinate scaled by its running RMS) or 'sgd', got "
                             f"{self.optimizer!r}")
        for key, low in (("profile_elements_per_step", 1), ("loss_window", 0),
                         ("loss_samples", 2), ("trial_steps", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= low):
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
        if not 0 <= self.loss_ratio <= 1:
            raise ValueError(f"loss_ratio must be a share in [0, 1], got {self.loss_ratio}")
        if not isinstance(self.cache, bool):
            raise ValueError(f"cache must be True or False, got {self.cache!r}")
        if not isinstance(self.tunables, Tunables):
            raise ValueError(f"tunables must be a collectives.policy.tunables.Tunables, got "
                             f"{self.tunables!r}")
        for key in ("cache_dir", "link"):
            value = getattr(self, key)
            if value is not None and not (isinstance(value, str) and value):
                raise ValueError(f"{key} must be None or a non-empty string, got {value!r}")

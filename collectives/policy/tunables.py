"""The automatic policy's inner numbers: what its parts decide with below ``AutoConfig``.

``AutoConfig`` holds what a user sets; these are the settings under it that a user rarely
should, each with the reason for its default, in one frozen object the config carries
(``AutoConfig.tunables``) and every part reads from there. Numbers that are not choices stay
where they are: validation bounds of the cache files (``cache``, ``machine``), the columns of
the table (``columns``), formats and schema versions, and a statistic's constant
(``trial.MAD_TO_SE``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Tunables:
    """The automatic policy's inner tunables (validated; see the module doc)."""

    #: A move of a bucket's live share of the gradient norm worth pricing again: timing noise
    #: moves the shares by a few percent, and the plan would come out the same (``guards``).
    shift: float = 0.05
    #: Steps per gradient-norm reading once decided: a pass over every bucket costs the
    #: critical path, and a window's mean needs no more than one step in four.
    norm_every: int = 4
    #: Steps after a trial's switch not counted: the first regroups buffers (``trial``).
    skip: int = 1
    #: Rounds a trial's timings take turns in (``trial``): the plans alternate, so that a
    #: drift of a shared machine falls on each alike; each switch costs a step not counted.
    #: Three rounds of four counted steps: at 4 ranks on 2 cores, gpt's steps at 1 Gbit/s
    #: spread by about 10%, and six steps a plan could not tell 8 bits 17% faster from 16.
    trial_rounds: int = 3
    #: The least share of the simpler plan's step a plan of more error must save in a trial,
    #: however tightly measured: below 3% a shared machine's drift, not the plan, decides.
    min_share: float = 0.03
    #: A trial times every layer uncompressed only where the cost model prices that within
    #: this many times the plan's communication: beyond, those steps only cost (``Decider``).
    uncompressed_far: float = 1.5
    #: Standard errors a loss slope must clear to count as a rise or a fall: two keeps a
    #: noisy loss from triggering a fallback about one window in twenty (``quality``).
    z: float = 2.0
    #: Timed runs of a small layer's codecs while profiling (the least is kept): a small
    #: layer's time is noisy, and five runs cost well under a millisecond (``profile``).
    repeats: int = 5
    #: Elements a large layer is profiled on: 16K code in well under a millisecond per
    #: candidate and measure a relative error to about 1% (``profile.sample``).
    sample: int = 1 << 14
    #: Rows a matrix's sample keeps at least: a low-rank coder on a few rows of noise would
    #: look far better than on the whole matrix (``profile.sample``).
    min_rows: int = 64
    #: What one sampled element costs a profiling step against one handed over: every
    #: candidate codes it and its errors are measured (``probing.schedule``).
    coded: int = 4
    #: Adam's second-moment decay, PyTorch's default: errors are measured as Adam sees them
    #: (``moments``).
    beta2: float = 0.999
    #: Adam's epsilon, PyTorch's default (``moments``).
    eps: float = 1e-8
    #: Elements of the tensor a collective's fixed cost is timed on: small enough that the
    #: fixed cost dominates its time (``latency``).
    latency_size: int = 1024
    #: Timed rounds of that collective after a warm-up (the median is kept): one per
    #: profiling step, the rest at the decision (``latency``, ``costs``).
    latency_repeats: int = 5

    def __post_init__(self) -> None:
        for f in fields(self):
            value, whole = getattr(self, f.name), isinstance(f.default, int)
            typed = isinstance(value, int) if whole else isinstance(value, int | float)
            least_ok = value >= 0 if f.name == "skip" else value > 0
            if isinstance(value, bool) or not typed or not least_ok:
                raise ValueError(f"tunables.{f.name} must be a "
                                 f"{'whole number' if whole else 'number'} "
                                 f"{'>= 0' if f.name == 'skip' else '> 0'}, got {value!r}")
        for name in ("shift", "min_share", "beta2"):
            if not getattr(self, name) < 1:
                raise ValueError(f"tunables.{name} must be a share below 1, got "
                                 f"{getattr(self, name)!r}")


#: The defaults, for the parts used on their own (a profiler or a schedule without a policy).
DEFAULTS = Tunables()

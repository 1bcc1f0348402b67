"""A decision in words: why each layer is sent as it is, the table, and a one-line summary.

The table's ``step_us`` column is each layer's part of the predicted step time: its own
coding and bytes, plus an equal part of the fixed cost of the collective it travels in (the
layers of a bucket that share a compressor share one collective). So the column adds up to
the step's prediction, less what the layers never profiled add (``-``: under ``min_numel``,
or new): their bytes, priced by the model alone, and the fixed cost of any collective only
they travel in. The footer gives both sums.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import compressors

from . import plan
from .base import short
from .criterion import sixteen
from .layers import Layer

if TYPE_CHECKING:
    from .config import AutoConfig

SMALL = "small (< min_numel), rides in its bucket"


@dataclass(frozen=True)
class Options:
    """A layer's options, per candidate: its price without the fixed cost (``body``,
    seconds) and its weighted squared error (``errors``)."""

    body: Sequence[float]
    errors: Sequence[float]


@dataclass(frozen=True)
class Verdicts:
    """What the criterion says of each candidate for a layer: its residual grows past
    ``max_residual`` (``grew``), its own error is past ``max_error`` (``over``), its error in
    the criterion's measure (``rel``), and whether that error cannot be bounded
    (``unbounded``), and why not (``blocked``)."""

    grew: Sequence[bool]
    over: Sequence[bool]
    rel: Sequence[float] | None = None
    unbounded: Sequence[bool] | None = None
    blocked: str | None = None


def why(cfg: AutoConfig, layer: Layer, seen: bool, c: int, options: Options,
        verdicts: Verdicts, slack: float, wanted: int | None) -> str:
    """Why a layer is sent with candidate ``c``, in a few words: for a compressed one, the
    candidates its residual ruled out (if any); for one sent at 16 bits or more, what kept
    every compressor below that away. ``seen``: the layer was measured; ``slack``: the
    squared budget the plan leaves; ``wanted``: the candidate a standing decision kept it
    from (hysteresis)."""
    body, errors = options.body, options.errors
    grew, over, unbounded = verdicts.grew, verdicts.over, verdicts.unbounded
    cands = cfg.candidates
    none = cands.index("none")
    held = [short(cands[j]) for j, g in enumerate(grew) if g and j != none]
    if not sixteen(cands[c]):
        return f"held back, residual grows: {', '.join(held)}" if held else "-"
    if layer.numel < cfg.min_numel:
        return f"{SMALL} uncompressed"
    if not seen:
        return "not profiled yet"
    free = [False] * len(cands) if unbounded is None else list(unbounded)
    narrow = [j for j in range(len(cands)) if not sixteen(cands[j])]
    ruled = [j for j in narrow if grew[j] or over[j] or free[j]]
    others = [j for j in range(len(cands)) if j != none]
    allowed = [j for j in others if not (grew[j] or over[j] or free[j])]
    if (narrow and len(ruled) == len(narrow)) or not allowed:
        return convergence(cfg, verdicts, free, narrow or others)
    if c != none:
        return "-"
    if wanted is not None:
        return f"standing decision kept (over {short(cands[wanted])}, not clearly faster)"
    # Cheaper than none by more than noise, and than every option of less error (``prune``).
    kept = plan.prune([body], [errors], cfg.min_gain, cfg.margin)[0]
    cheaper = [j for j in allowed if math.isfinite(kept[j])
               and plan.clear(body[j], body[none], cfg.min_gain, cfg.margin)]
    if not cheaper:
        best = min(allowed, key=lambda j: body[j])
        return f"no compressor clearly cheaper (best {short(cands[best])})"
    best = min(cheaper, key=lambda j: body[j])
    if errors[best] - errors[none] > slack:
        return "error budget"
    return "a collective of its own costs more than it saves"


def convergence(cfg: AutoConfig, verdicts: Verdicts, free: list[bool], among: list[int]
                ) -> str:
    """What the criterion says of the candidates ``among``, all ruled out (see ``why``;
    ``free``: whose error cannot be bounded)."""
    grew, over, rel, blocked = verdicts.grew, verdicts.over, verdicts.rel, verdicts.blocked
    cands = cfg.candidates
    name = "Adam-scaled error" if cfg.optimizer == "adam" else "error"
    parts = []
    free_ones = [short(cands[j]) for j in among if free[j]]
    if free_ones:  # named: a veto of one candidate is not one of the layer
        every = len(free_ones) == len(among)
        parts.append(f"{name} cannot be bounded{'' if every else ' for ' + ', '.join(free_ones)}"
                     f" ({blocked or 'unknown'})")
    held = [short(cands[j]) for j in among if grew[j] and not free[j]]
    if held:
        parts.append(f"residual grows ({', '.join(held)})")
    big = [j for j in among if over[j] and not free[j]]
    if big and rel is not None:
        j = min(big, key=lambda j: rel[j])
        parts.append(f"{name} {rel[j]:.2g} > {cfg.max_error:g} ({short(cands[j])})")
    elif big:
        parts.append(f"{name} > max_error ({', '.join(short(cands[j]) for j in big)})")
    return "convergence: " + "; ".join(parts)


def sent(row: Mapping[str, Any], rides: Mapping[str, str]) -> tuple[str, int]:
    """The compressor a row's layer travels with and its bytes: its own decision, or the
    group of its bucket it rides in (``rides``: layer name to that group's compressor)."""
    spec = rides.get(row["layer"], row["compressor"])
    if spec == row["compressor"]:
        return spec, int(row["bytes"])
    return spec, int(compressors.get(spec).payload_nbytes(row["numel"]) or row["bytes"])


def render(rows: list[dict[str, Any]], error: float, budget: float,
           collective_s: Mapping[str, float], rides: Mapping[str, str] | None = None) -> str:
    """A decision as a text table (see the module doc): per layer its numel, compressor,
    bytes, part of the predicted step, relative error, residual and why; then the step."""
    rides = rides or {}
    width = max(len(r["layer"]) for r in rows)
    lines = [f"{'layer':<{width}} {'numel':>9} {'compressor':<16} {'bytes':>9} "
             f"{'step_us':>9} {'error':>7} {'resid':>6}  why"]
    for r in rows:
        spec, nbytes = sent(r, rides)
        part = r.get("step_us") if r.get("profiled", True) else None
        why_ = f"{SMALL}'s {short(spec)} collective" if r["layer"] in rides else \
            r.get("why", "-")
        lines.append(f"{r['layer']:<{width}} {r['numel']:>9} {short(spec):<16} {nbytes:>9} "
                     f"{'-' if part is None else f'{part:.1f}':>9} {r['error']:>7.4f} "
                     f"{r.get('residual', 0.0):>6.2f}  {why_}")
    if all("step_us" in r for r in rows):
        total = sum(r["step_us"] for r in rows)
        listed = sum(r["step_us"] for r in rows if r["profiled"])
        lines.append(f"predicted step {total / 1e3:.2f} ms = {listed / 1e3:.2f} ms in step_us "
                     f"+ {(total - listed) / 1e3:.2f} ms for the layers never profiled (-)")
        lines.append("(step_us: a layer's coding and bytes plus an equal part of the fixed cost "
                     "of the collective it travels in; the layers never profiled add their "
                     "bytes and any collective only they travel in, priced by the model)")
    lines.append(f"total relative error {error:.4f} (budget {budget})")
    if collective_s:
        lines.append("one collective (us): " + ", ".join(
            f"{short(k)} {v * 1e6:.0f}" for k, v in collective_s.items()))
    return "\n".join(lines)


def summary(step: int, reason: str, rows: list[dict[str, Any]], total_s: float,
            rides: Mapping[str, str] | None = None) -> str:
    """One line for a decision: how many layers are compressed, the bytes sent against
    float32's, and the predicted step time."""
    travel = [sent(r, rides or {}) for r in rows]
    packed = sum(spec != "none" for spec, _ in travel)
    full = sum(4 * max(r["numel"], 1) for r in rows)
    ratio = sum(n for _, n in travel) / full if full else 1.0
    return (f"step {step}: decided ({reason}): {packed} of {len(rows)} layers compressed, "
            f"{ratio:.3f} of the float32 bytes, predicted {total_s * 1e3:.2f} ms a step")


def log_decision(log: Any, step: int, reason: str, rows: list[dict[str, Any]], total_s: float,
                 rides: Mapping[str, str], changed: bool, table: str) -> None:
    """Log a decision (rank 0): the summary at INFO, with the table when the decisions
    changed, else the table at DEBUG."""
    if not log.isEnabledFor(logging.INFO):
        return
    line = summary(step, reason, rows, total_s, rides)
    if changed:
        log.info("%s\n%s", line, table)
        return
    log.info("%s", line)
    log.debug("step %d: the decisions, unchanged\n%s", step, table)


def fell_behind(step: int, fell: Mapping[str, Any], safe: str) -> str:
    """The warning of a quality fallback (see ``quality``)."""
    return (f"step {step}: quality fell behind after the decision at step {fell['decision']} "
            f"(the loss's slope {fell['after']:.3g} a step, against {fell['before']:.3g} "
            f"before it): {len(fell['held'])} layers compressed below 16 bits send {safe} "
            f"until a later decision finds the loss falling again")

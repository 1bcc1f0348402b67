"""The checks a compressed call makes before it runs, on the rank that passed the argument
(``Compression`` runs them when built; the fields every rank must share are
``Compression.fields``)."""

from __future__ import annotations

from compressors import Compressor, ErrorFeedback

from ..agreement import Worded
from ..algorithms import get as get_algorithm
from ..algorithms import two_level
from ..validation import digest


def _spec(comp: Compressor) -> str:
    return f"{comp.name}:{comp.params}"


def spec_text(comp: Compressor) -> str:
    opts = ",".join(f"{k}={v}" for k, v in comp.params.items())
    return f"{comp.name}:{opts}" if opts else comp.name


def check_feedback(feedback: ErrorFeedback | None, comp: Compressor) -> None:
    """A feedback must wrap the call's compressor: its residuals are what that one dropped."""
    if feedback is None:
        return
    own = feedback.compressor
    if not isinstance(own, Compressor) or own.name != comp.name or own.params != comp.params:
        mine = _spec(own) if isinstance(own, Compressor) else repr(own)
        raise ValueError(
            f"{type(feedback).__name__} was built for {mine}, but the call compresses with "
            f"{_spec(comp)}; build it with the call's compressor, e.g. "
            f"{type(feedback).__name__}(compressors.get({spec_text(comp)!r}))"
        )


def check_algorithm(algorithm: str) -> None:
    """An unknown dense algorithm raises here, on the rank that passed it, before any
    message; "two_level" also checks its cross-host algorithm (``two_level.CROSS``)."""
    if algorithm != "auto":
        get_algorithm(algorithm)
    if algorithm == "two_level":
        two_level.cross_algorithm()


#: How a compressed allreduce may cross hosts (see ``collectives.allreduce``).
HIERARCHIES = ("auto", "flat", "two_level")


def known_hierarchy(hierarchy: str) -> None:
    """ValueError unless ``hierarchy`` is one of ``HIERARCHIES``."""
    if hierarchy not in HIERARCHIES:
        raise ValueError(f"unknown hierarchy {hierarchy!r} (hierarchy must be one of "
                         f"{', '.join(HIERARCHIES)})")


def feedback_digest(feedback: ErrorFeedback | None) -> int:
    """0 without feedback, else a fingerprint of its kind and settings (they decide whether
    the fused kernel runs, and with it how a tensor is cut into pipelined segments)."""
    if feedback is None:
        return Worded(0, "none")
    settings = (feedback.beta, feedback.gamma, getattr(feedback, "momentum", None))
    text = f"{type(feedback).__qualname__}(beta={settings[0]}, gamma={settings[1]}" + \
        (f", momentum={settings[2]})" if settings[2] is not None else ")")
    return Worded(digest(f"{type(feedback).__qualname__}:{settings}") or 1, text)

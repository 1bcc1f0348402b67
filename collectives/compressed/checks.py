"""What a compressed allreduce checks before it runs: locally (feedback, algorithm names) and
across ranks (the fields every rank must pass alike, see ``collectives.validation``)."""

from __future__ import annotations

import numpy as np

from compressors import Compressor, ErrorFeedback
from compressors.dtypes import DType
from compressors.payload import checksum_enabled

from .. import ops
from ..agreement import Worded
from ..algorithms import get as get_algorithm
from ..algorithms import names as algorithm_names
from ..algorithms import two_level
from ..sparse import ALGORITHMS as SPARSE_ALGORITHMS
from ..validation import digest
from . import SCHEMES, compressor_digest


def _spec(comp: Compressor) -> str:
    return f"{comp.name}:{comp.params}"


def _text(comp: Compressor) -> str:
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
            f"{type(feedback).__name__}(compressors.get({_text(comp)!r}))"
        )


def check_algorithms(algorithm: str, sparse_algorithm: str, k: int | None) -> None:
    """Unknown names raise here, on the rank that passed them, before any message."""
    if algorithm != "auto":
        get_algorithm(algorithm)
    if sparse_algorithm != "auto" and sparse_algorithm not in SPARSE_ALGORITHMS:
        raise ValueError(f"unknown sparse algorithm {sparse_algorithm!r}; available: auto, "
                         f"{', '.join(SPARSE_ALGORITHMS)}")
    if k is not None and (not isinstance(k, int | np.integer) or k < 0):
        raise ValueError(f"k must be a non-negative int (entries gtopk keeps), got {k!r}")


#: How a compressed allreduce may cross hosts (see ``collectives.allreduce``).
HIERARCHIES = ("auto", "flat", "two_level")


def known_hierarchy(hierarchy: str) -> None:
    """ValueError unless ``hierarchy`` is one of ``HIERARCHIES``."""
    if hierarchy not in HIERARCHIES:
        raise ValueError(f"unknown hierarchy {hierarchy!r} (hierarchy must be one of "
                         f"{', '.join(HIERARCHIES)})")


def check_hierarchy(hierarchy: str, comp: Compressor, algorithm: str) -> None:
    """Unknown hierarchies, and compressors whose payloads a shard cannot carry, raise here."""
    known_hierarchy(hierarchy)
    if hierarchy == "two_level" and comp.capabilities.allreduce_steps:
        raise ValueError(f"hierarchy='two_level' cannot carry {comp.name}: it compresses "
                         "matrices and a host's shard is a flat slice; use hierarchy='flat'")
    if algorithm == "two_level":
        two_level.cross_algorithm()


def feedback_digest(feedback: ErrorFeedback | None) -> int:
    """0 without feedback, else a fingerprint of its kind and settings (they decide whether
    the fused kernel runs, and with it how a tensor is cut into pipelined segments)."""
    if feedback is None:
        return Worded(0, "none")
    settings = (feedback.beta, feedback.gamma, getattr(feedback, "momentum", None))
    text = f"{type(feedback).__qualname__}(beta={settings[0]}, gamma={settings[1]}" + \
        (f", momentum={settings[2]})" if settings[2] is not None else ")")
    return Worded(digest(f"{type(feedback).__qualname__}:{settings}") or 1, text)


def _index(options: list[str], value: str) -> Worded:
    """A choice as its position among ``options`` (-1 for auto), with its name."""
    return Worded(-1 if value == "auto" else options.index(value), value)


def fields(comp: Compressor, feedback: ErrorFeedback | None, scheme: str, op: str,
           algorithm: str, sparse_algorithm: str, k: int | None, name: str | None, step: int,
           count: int, dtype: DType, hierarchy: str = "auto") -> dict[str, int]:
    """Every argument that changes what the ranks exchange, as ints every rank must share."""
    out = {
        "element count": count,
        "dtype": Worded(dtype.code, dtype.name),
        "op": Worded(ops.SUPPORTED_OPS.index(op), op),
        "scheme": _index(list(SCHEMES), scheme),
        "compressor and its parameters": Worded(compressor_digest(comp), _text(comp)),
        "error feedback (kind and settings)": feedback_digest(feedback),
        "algorithm": _index(list(algorithm_names()), algorithm),
        "sparse_algorithm": _index(list(SPARSE_ALGORITHMS), sparse_algorithm),
        "k": -1 if k is None else k,
        # two_level.CROSS runs where the dense algorithm is (or may be) two_level
        "hierarchy (and two_level.CROSS)": digest(
            f"{hierarchy}/{two_level.CROSS if algorithm in ('auto', 'two_level') else ''}"),
        # payload sizes count the checksum (compressors.payload.set_checksum)
        "payload checksum (compressors.payload.set_checksum)": int(checksum_enabled()),
    }
    if comp.capabilities.needs_shared_seed:  # the same random choices on every rank
        out["name (it seeds the shared random choices)"] = digest(name or "buffer")
        out["step (it seeds the shared random choices)"] = step
    return out

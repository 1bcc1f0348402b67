"""One compressed call as one value: what to compress with, how, and under which name.

``allreduce(x, compress=Compression("uniform:bits=8", feedback=fb, name="w", step=3))`` or
the same as keywords (``allreduce(x, compressor="uniform:bits=8", feedback=fb, ...)``, turned
into this value in :meth:`Compression.of`). It is built once where the caller's intent is
known, checks itself when built (a bad field raises TypeError/ValueError naming it and what
would work) and travels down the whole path as one argument: the checks, the agreement
across ranks (:meth:`fields`), the levels, the scheme and its per-call state all read it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compressors import Compressor, ErrorFeedback
from compressors.dtypes import DType
from compressors.payload import checksum_enabled

from .. import moved, ops
from ..agreement import Worded
from ..algorithms import names as algorithm_names
from ..algorithms import two_level
from ..sparse import ALGORITHMS as SPARSE_ALGORITHMS
from ..sparse import parse as parse_sparse
from ..transport.base import Communicator
from ..validation import digest
from . import SCHEMES, check_scheme, compressor_digest, resolve_compressor
from .checks import check_feedback, feedback_digest, known_hierarchy, spec_text
from .common import Ctx

#: The keywords of ``allreduce`` that describe the compression (sugar for the value).
KEYWORDS = ("compressor", "feedback", "scheme", "name", "step", "sparse_algorithm", "stats",
            "hierarchy")


@dataclass(frozen=True)
class Compression:
    """A compressed allreduce's compression, checked when built.

    compressor: a ``compressors.Compressor`` or a spec such as ``"topk:ratio=0.01"``.
    feedback: a ``compressors.ErrorFeedback`` built for that compressor (needs ``name``).
    scheme: "auto" or a scheme the compressor's payloads can go through (``SCHEMES``).
    name, step: the tensor's name, a str or None (error-feedback key, shared seeds), and the
    training step, an integer in [0, 2**63 - 1].
    sparse_algorithm: the sparse scheme's allreduce: "auto", a name, or "gtopk:k=N" (a global
    top-k keeping N sums; bare "gtopk": as many as the most any rank sends).
    hierarchy: "auto", "flat" or "two_level" (how the call crosses hosts).
    stats: a dict the call fills with its scheme, codec seconds and bytes sent, or None.

    Example::

        >>> import numpy as np, collectives, compressors
        >>> fb = compressors.ErrorFeedback(compressors.get("uniform:bits=8"))
        >>> call = collectives.Compression("uniform:bits=8", feedback=fb, name="w")
        >>> x = np.ones(1000, np.float32)
        >>> y = collectives.allreduce(x, compress=call.at(step=1), op="avg")
        >>> assert np.allclose(y, 1.0, atol=0.01) and "w" in fb.residuals
    """

    compressor: Compressor
    feedback: ErrorFeedback | None = None
    scheme: str = "auto"
    name: str | None = None
    step: int = 0
    sparse_algorithm: str = "auto"
    hierarchy: str = "auto"
    stats: dict | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        comp = resolve_compressor(self.compressor)
        object.__setattr__(self, "compressor", comp)
        object.__setattr__(self, "step", _step(self.step))
        if self.name is not None and not isinstance(self.name, str):
            raise TypeError(f"name must be a str (the tensor's name, the same on every rank: "
                            f"it keys the residual and seeds shared draws) or None, got "
                            f"{type(self.name).__name__} {self.name!r:.60}")
        if self.stats is not None and not isinstance(self.stats, dict):
            raise TypeError(f"stats must be a dict for the call to fill (scheme, seconds, "
                            f"bytes) or None, got {type(self.stats).__name__}")
        fb = self.feedback
        if fb is not None and not isinstance(fb, ErrorFeedback):
            raise TypeError("feedback must be a compressors.ErrorFeedback (it keeps the "
                            f"residuals between steps), got {type(fb).__name__}")
        if fb is not None and not self.name:
            raise ValueError("pass name=: error feedback keeps one residual per tensor name")
        check_scheme(self.scheme, comp)
        check_feedback(fb, comp)
        _ = self.sparse  # an unknown sparse algorithm or option raises here (sparse.parse)
        known_hierarchy(self.hierarchy)
        if self.hierarchy == "two_level" and comp.capabilities.allreduce_steps:
            raise ValueError(f"hierarchy='two_level' cannot carry {comp.name}: it compresses "
                             "matrices and a host's shard is a flat slice; use hierarchy='flat'")

    @classmethod
    def of(cls, compress: Compression | str | Compressor | None = None,
           **keywords: Any) -> Compression | None:
        """The value from ``allreduce``'s ``compress=`` and its keyword sugar (``KEYWORDS``);
        None when neither names a compressor. Keywords beside a ``Compression`` replace its
        fields."""
        unknown = sorted(set(keywords) - set(KEYWORDS))
        moved.refuse("allreduce", unknown)  # a keyword it took before: where it went
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}; a compressed call "
                            f"takes compress= and the keywords {', '.join(KEYWORDS)}")
        spec = keywords.pop("compressor", None)
        if isinstance(compress, Compression):
            if spec is not None:
                raise TypeError("pass the compressor once: in compress= or as compressor=")
            return dataclasses.replace(compress, **keywords) if keywords else compress
        if compress is not None and spec is not None:
            raise TypeError("pass the compressor once: in compress= or as compressor=")
        spec = compress if compress is not None else spec
        if spec is None:
            if keywords.get("feedback") is not None:
                raise ValueError("feedback= needs a compressor (compressor= or compress=)")
            return None
        return cls(spec, **keywords)

    @functools.cached_property
    def sparse(self) -> tuple[str, int | None]:
        """The sparse algorithm's name and gtopk's k (None unless written in it), parsed once
        per value (``collectives.sparse.parse``)."""
        return parse_sparse(self.sparse_algorithm)

    @property
    def key(self) -> str:
        """The name the call's residual and scratch memory are kept under."""
        return self.name or "buffer"

    def at(self, **changes: Any) -> Compression:
        """This value with some fields changed (``at(name="w@shard0", step=4)``), checked
        again."""
        return dataclasses.replace(self, **changes)

    def resolved(self, scheme: str) -> Compression:
        """This value with "auto" resolved to ``scheme``, one the route chose among the
        schemes the compressor can use (so not checked again)."""
        if scheme == self.scheme:
            return self
        out = copy.copy(self)
        object.__setattr__(out, "scheme", scheme)
        return out

    def fields(self, op: str, algorithm: str, count: int, dtype: DType) -> dict[str, int]:
        """Every argument that changes what the ranks exchange, as ints every rank must share
        (``collectives.validation.agree``)."""
        comp = self.compressor
        out = {
            "element count": count,
            "dtype": Worded(dtype.code, dtype.name),
            "op": Worded(ops.SUPPORTED_OPS.index(op), op),
            "scheme": _index(list(SCHEMES), self.scheme),
            "compressor and its parameters": Worded(compressor_digest(comp), spec_text(comp)),
            "error feedback (kind and settings)": feedback_digest(self.feedback),
            "algorithm": _index(list(algorithm_names()), algorithm),
            "sparse_algorithm": _index(list(SPARSE_ALGORITHMS), self.sparse[0]),
            "k": -1 if self.sparse[1] is None else self.sparse[1],
            # two_level.CROSS runs where the dense algorithm is (or may be) two_level
            "hierarchy (and two_level.CROSS)": digest(
                f"{self.hierarchy}/"
                f"{two_level.CROSS if algorithm in ('auto', 'two_level') else ''}"),
            # payload sizes count the checksum (compressors.payload.set_checksum)
            "payload checksum (compressors.payload.set_checksum)": int(checksum_enabled()),
        }
        if comp.capabilities.needs_shared_seed:  # the same random choices on every rank
            out["name (it seeds the shared random choices)"] = digest(self.key)
            out["step (it seeds the shared random choices)"] = self.step
        return out

    def ctx(self, comm: Communicator, tag: int, x: Any, dtype: DType,
            algorithm: str = "auto") -> Ctx:
        """The per-call state of this call on the input ``x``, with ``algorithm`` for a dense
        payload (residual and scratch memory kept under ``key``); sums accumulate in float32,
        float64 for float64 buffers."""
        acc = np.dtype(np.float64 if dtype.name == "float64" else np.float32)
        name, k = self.sparse
        return Ctx(comm, tag, self.compressor, self.feedback, self.key, self.step, x, dtype,
                   acc, algorithm=algorithm, sparse_algorithm=name, k=k)


#: The largest step: the ranks compare it as a 64-bit integer (``fields``).
MAX_STEP = 2**63 - 1


def _step(step: Any) -> int:
    """``step`` as an int in [0, ``MAX_STEP``]; TypeError or ValueError naming it."""
    if isinstance(step, bool) or not isinstance(step, int | np.integer):
        raise TypeError(f"step must be an integer (the training step, from 0), got "
                        f"{type(step).__name__} {step!r:.60}")
    if not 0 <= int(step) <= MAX_STEP:
        raise ValueError(f"step must be an integer in [0, 2**63 - 1] (the ranks compare it as "
                         f"a 64-bit integer), got {int(step)}")
    return int(step)


# A keyword the value took before (its generated __init__ would give Python's bare error).
Compression.__init__ = moved.keywords("Compression")(Compression.__init__)  # type: ignore[method-assign]


def _index(options: list[str], value: str) -> Worded:
    """A choice as its position among ``options`` (-1 for auto), with its name."""
    return Worded(-1 if value == "auto" else options.index(value), value)

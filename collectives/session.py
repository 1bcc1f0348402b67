"""Session: what the torch front doors decide once, in one object.

The DDP hook (:class:`collectives.ddp.CompressionState`), FSDP's reduce-scatter
(:class:`collectives.fsdp.CompressedReduceScatter`), the ``compcoll`` backend and the
optimizers of :mod:`collectives.optim` each hold a :class:`Session` and keep nothing of their
own of what it owns:

* the **policy** (a compressor spec, rules, a table, "auto"; :func:`collectives.policy.as_policy`)
  and the **compressor instances**, one per spec (PowerSGD's warm starts live in them);
* **one residual store with one keying rule**: an error-feedback residual is found by
  ``(spec, scope, name)``. ``spec`` is the compressor with its parameters; ``name`` is the
  call's own name, the same on every rank and in every run of the same program (it also seeds
  stochastic rounding): a DDP group's parameter names, ``fsdp:<module path>/rs<numel>:<dtype>``,
  ``backend/<numel>:<dtype>``, ``onebit``, ``diloco``. ``scope`` is ``""`` wherever the name
  alone says which tensor a call reduces; the backend, whose calls are named only by size,
  scopes them by the tensor (``<numel>:<dtype>#<slot>``: the slot counts, in order of first
  use, the distinct buffers of that size, the same on every rank and in every run), and keeps
  at most ``max_scopes`` of them, the least recently used dropped first. A front door that
  names its calls by its model's own names (a DDP state) takes an owner scope
  (:meth:`owner_scope`): ``""`` for the first one, ``ddp#<i>`` for the i-th after it, so two
  models whose parameters share names never share a residual; owner scopes are never dropped;
* ``min_numel`` (``config.MIN_NUMEL``): smaller tensors go uncompressed;
* **validate-once**: the ranks compare a call's arguments the first time a name is sent
  (:meth:`validate_once`), and each call name's step count (:meth:`next_step`);
* ``state_dict`` / ``load_state_dict`` of all of the above (the DDP state saves its residuals
  per parameter instead, see :mod:`collectives.ddp.checkpoint`, and the rest through here).

"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

import compressors
from compressors import device_feedback

from . import session_state
from .compressed.checks import known_hierarchy
from .config import MIN_NUMEL

if TYPE_CHECKING:
    from .policy import Policy

__all__ = ["Session"]

VERSION = session_state.VERSION


class Session:
    """The policy, compressors, residuals, ``min_numel`` and validate-once of a torch front
    door (see the module doc). Arguments: ``policy``, ``error_feedback`` (keep residuals),
    ``min_numel`` (smaller tensors go uncompressed), ``hierarchy`` ("auto", "flat",
    "two_level": how compressed calls cross hosts), ``max_scopes`` (None: no bound; else the
    most scopes other than ``""`` kept, least recently used dropped first).

    Example::

        >>> from collectives import Session
        >>> s = Session("uniform:bits=8")
        >>> fb = s.feedback(s.spec)  # the one store: (spec, scope, name)
        >>> s.next_step("w"), s.next_step("w")
        (0, 1)
        >>> restored = Session("uniform:bits=8")
        >>> restored.load_state_dict(s.state_dict())
        >>> assert restored.next_step("w") == 2
    """

    def __init__(self, policy: Any = "uniform:bits=8", *, error_feedback: bool = True,
                 min_numel: int = MIN_NUMEL, hierarchy: str = "auto",
                 max_scopes: int | None = None) -> None:
        if not isinstance(error_feedback, bool):
            raise ValueError(f"error_feedback must be True or False, got {error_feedback!r}")
        if isinstance(min_numel, bool) or not (isinstance(min_numel, int) and min_numel >= 0):
            raise ValueError(f"min_numel must be an integer >= 0, got {min_numel!r}")
        if max_scopes is not None and (isinstance(max_scopes, bool) or not (
                isinstance(max_scopes, int) and max_scopes >= 1)):
            raise ValueError(f"max_scopes must be None or an integer >= 1, got {max_scopes!r}")
        known_hierarchy(hierarchy)
        from .policy import as_policy  # loaded on first use (as ``collectives.policy``)

        self.policy: Policy = as_policy(policy)
        self.error_feedback, self.min_numel = error_feedback, min_numel
        self.hierarchy, self.max_scopes = hierarchy, max_scopes
        # A Compressor passed in is used as it is (its warm starts).
        self._comps: dict[str, compressors.Compressor] = dict(self.policy.instances())
        self._store: OrderedDict[tuple[str, str], compressors.ErrorFeedback] = OrderedDict()
        self._steps: dict[str, int] = {}
        self._validated: set[tuple[str, str, str, int]] = set()
        #: scopes dropped past ``max_scopes`` (their residuals lost)
        self.evicted = 0
        self._owners: dict[str, int] = {}  # owner scopes handed out, by kind
        self._owned: set[str] = set()  # those scopes (never dropped past max_scopes)

    # -- the policy's one compressor -------------------------------------------------------
    @property
    def spec(self) -> str:
        """The compressor of a one-compressor policy (what a front door that compresses every
        tensor alike uses: FSDP's reduce-scatter, the backend, the optimizers); ValueError
        for a policy that chooses per layer."""
        spec = getattr(self.policy, "spec", None)
        if not isinstance(spec, str) or self.policy.adaptive:
            raise ValueError(f"this front door compresses every tensor alike and needs a "
                             f"session with one compressor (a spec such as "
                             f"'uniform:bits=8'), got the policy {self.policy.describe()!r}")
        return spec

    def compressor(self, spec: str) -> compressors.Compressor:
        """The session's instance of ``spec`` (made on first use, then kept)."""
        if spec not in self._comps:
            self._comps[spec] = compressors.get(spec)
        return self._comps[spec]

    def compresses(self, numel: int) -> bool:
        """Whether a tensor of ``numel`` elements is large enough to compress."""
        return numel >= max(self.min_numel, 1)

    # -- the residual store ----------------------------------------------------------------
    def feedback(self, spec: str, scope: str = "") -> compressors.ErrorFeedback | None:
        """The error feedback holding the residuals of ``spec`` in ``scope`` (made on first
        use; None without error feedback). Its residuals are keyed by the call's name."""
        if not self.error_feedback:
            return None
        key = (spec, scope)
        fb = self._store.get(key)
        if fb is not None:
            if scope:
                self._store.move_to_end(key)
            return fb
        fb = self._store[key] = compressors.ErrorFeedback(self.compressor(spec))
        if scope and self.max_scopes is not None:  # a scope was made: one may be one too many
            scoped = [k for k in self._store if k[1] and k[1] not in self._owned]
            for old in scoped[:max(0, len(scoped) - self.max_scopes)]:
                del self._store[old]
                self.evicted += 1
        return fb

    def owner_scope(self, kind: str) -> str:
        """A scope of its own for a new front door of ``kind`` that names its calls by its
        model's names (a DDP state): ``""`` for the first one, ``"<kind>#<i>"`` for the i-th
        after it (the same on every rank and in every run that makes them in the same order).
        Owner scopes do not count against ``max_scopes``."""
        if not kind or "#" in kind or "|" in kind:
            raise ValueError(f"an owner kind is a word without '#' or '|', got {kind!r}")
        i = self._owners[kind] = self._owners.get(kind, -1) + 1
        scope = f"{kind}#{i}" if i else ""
        if scope:
            self._owned.add(scope)
        return scope

    def held(self, spec: str, scope: str = "") -> compressors.ErrorFeedback | None:
        """The error feedback of ``spec`` in ``scope`` if one was made, else None (makes
        nothing)."""
        return self._store.get((spec, scope))

    def feedbacks(self) -> Iterator[tuple[str, str, compressors.ErrorFeedback]]:
        """Every (spec, scope, error feedback) of the store, oldest first."""
        for (spec, scope), fb in list(self._store.items()):
            yield spec, scope, fb

    def scopes(self) -> list[str]:
        """The scopes other than ``""`` held now, least recently used first."""
        return list(dict.fromkeys(scope for _, scope in self._store if scope))

    # -- validate-once and steps -------------------------------------------------------------
    def validate_once(self, name: str, spec: str, numel: int, scope: str = "") -> bool:
        """Whether the ranks should compare this call (the first time ``name`` is sent with
        ``spec`` and ``numel`` in ``scope``), not every step."""
        key = (scope, name, spec, numel)
        first = key not in self._validated
        self._validated.add(key)
        return first

    def next_step(self, name: str) -> int:
        """This call's step: the number of earlier calls named ``name`` (the same on every
        rank, which issue their calls in the same order)."""
        step = self._steps.get(name, 0)
        self._steps[name] = step + 1
        return step

    # -- checkpoints ------------------------------------------------------------------------
    def warm_starts(self) -> dict[str, dict[str, np.ndarray]]:
        """Copies of the warm starts (PowerSGD's Q) of the compressors that hold any, by spec."""
        warm = {spec: getattr(comp, "warm_state", dict)() for spec, comp in self._comps.items()}
        return {spec: qs for spec, qs in warm.items() if qs}

    def state_dict(self) -> dict[str, Any]:
        """This rank's lasting state: the step counts, the policy's state, the warm starts and
        every residual by ``"spec|scope"`` (device residuals copied back first)."""
        out = {}
        for spec, scope, fb in self.feedbacks():
            device_feedback.export_residuals(fb)
            out[f"{spec}|{scope}"] = fb.state_dict()
        return {"version": VERSION, "steps": dict(self._steps),
                "policy": self.policy.state_dict(), "warm_starts": self.warm_starts(),
                "feedback": out}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`. Everything is checked first: a bad dict, or one saved
        under a compressor this session's policy never uses, raises ValueError or TypeError
        naming the field (or both compressors) and changes nothing."""
        saved = session_state.check(state, self.policy.choices())
        before = self.policy.state_dict()
        try:
            self.policy.load_state_dict(saved.policy)
        except Exception:
            self.policy.load_state_dict(before)  # the one part that may refuse as it loads
            raise
        for spec, qs in saved.warm.items():
            self.compressor(spec).load_warm_state(qs)  # checked: takes them as they are
        self._steps = dict(saved.steps)
        feedback = saved.feedback
        if not self.error_feedback and saved.residuals:
            warnings.warn("Session.load_state_dict: this session keeps no error feedback "
                          "(error_feedback=False); the saved residuals are not used",
                          RuntimeWarning, stacklevel=2)
        if not self.error_feedback:
            feedback = {}
        # The feedback objects adapters hold (FSDP's, the optimizers') stay the same objects:
        # their residuals are replaced; those the state does not name are emptied.
        for key, fb in self._store.items():
            device_feedback.forget(fb)
            if key in feedback:
                fb.load_state_dict(feedback[key])  # checked
            else:
                fb.residuals.clear()
        for key, one in feedback.items():
            if key not in self._store:
                fb = self._store[key] = compressors.ErrorFeedback(self.compressor(key[0]))
                fb.load_state_dict(one)

    def __repr__(self) -> str:
        return (f"Session({self.policy.describe()!r}, error_feedback={self.error_feedback}, "
                f"min_numel={self.min_numel}, hierarchy={self.hierarchy!r})")

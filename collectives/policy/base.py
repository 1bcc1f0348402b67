"""The policy interface: which compressor each layer gets."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

import compressors

from .layers import Layer

if TYPE_CHECKING:
    from ..transport import Communicator


def canonical(spec: Any) -> str:
    """A compressor spec in one spelling ("uniform:bits=8,seed=0"), validated.

    Raises ValueError naming the spec when the compressor or a parameter is unknown.
    """
    if isinstance(spec, compressors.Compressor):
        comp = spec
    elif isinstance(spec, str):
        try:
            comp = compressors.get(spec)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"bad compressor spec {spec!r}: {exc}") from None
    else:
        raise ValueError(f"a compressor spec must be a string like 'uniform:bits=8' or a "
                         f"compressors.Compressor, got {type(spec).__name__}")
    params = ",".join(f"{k}={v}" for k, v in sorted(comp.params.items()))
    return f"{comp.name}:{params}" if params else comp.name


def short(spec: str) -> str:
    """A canonical spec without the parameters left at their defaults (for tables)."""
    comp = compressors.get(spec)
    keep = [f"{f.name}={getattr(comp, f.name)}" for f in dataclasses.fields(comp)
            if f.init and getattr(comp, f.name) != f.default]
    return f"{comp.name}:{','.join(keep)}" if keep else comp.name


class Policy:
    """Maps each layer to a compressor spec (a canonical string, see :func:`canonical`).

    Static policies implement ``choose``. Adaptive ones set ``adaptive = True`` and hear
    from the DDP hook through the methods below (``see_bucket``, ``wants_profile``,
    ``observe``, ``wants_norm``, ``observe_norm``, ``update``), and from the user through
    ``observe_loss``; they do nothing here: any policy may be called (see ``AutoPolicy``).
    """

    adaptive = False
    #: The model's layers, as :meth:`bind` got them (None before).
    layers: list[Layer] | None = None

    def choose(self, layer: Layer) -> str:
        raise TypeError(f"{type(self).__name__} does not implement choose(layer)")

    def describe(self) -> str:
        """The policy in words, alike on ranks that passed alike ones: the DDP hook compares
        it across ranks before its first message (a fixed spec, 'auto' and its settings)."""
        return type(self).__qualname__

    def choose_bucket(self, layers: list[Layer]) -> list[str]:
        """The compressor of each layer of one DDP bucket, in its order (``choose`` each,
        unless the policy groups a bucket's layers)."""
        return [self.choose(lay) for lay in layers]

    def bind(self, layers: list[Layer]) -> None:
        """Learn the model's layers (called once the model is known); a policy that checks
        itself against them does so here, and calls this too."""
        self.layers = list(layers)

    def choices(self) -> frozenset[str] | None:
        """Every compressor spec (canonical) this policy can choose; None where it cannot say
        before it runs (a policy of the user's own)."""
        return None

    def instances(self) -> dict[str, compressors.Compressor]:
        """Compressor objects passed in by the user, by canonical spec: the hook uses them
        as they are (their warm starts included) instead of building its own."""
        return {}

    # -- what the DDP hook reports (adaptive policies; nothing to do for a static one) -----
    def see_bucket(self, bucket: int, layers: list[Layer], dtypes: list[str]) -> None:
        """The layers of DDP bucket ``bucket`` in its order, with their dtypes."""

    def wants_profile(self, step: int, layer: str | None = None) -> bool:
        """Whether ``step`` profiles (the layer named ``layer``, when given): the hook then
        passes those gradients to :meth:`observe`."""
        return False

    def observe(self, step: int, layer: Layer, grad: np.ndarray,
                bucket: int | None = None) -> None:
        """This rank's gradient of ``layer`` (in DDP bucket ``bucket``) before compression,
        on the steps :meth:`wants_profile` asks for."""

    def wants_norm(self, step: int) -> bool:
        """Whether the hook should report ``step``'s gradient norms (:meth:`observe_norm`)."""
        return self.adaptive

    def engine_first(self) -> bool | None:
        """Whether a bucket sent uncompressed whole goes through the engine's own allreduce
        (True), ours (False), or as the state's ``plain`` says (None: nothing measured)."""
        return None

    def observe_norm(self, step: int, sq_norm: float, bucket: Hashable | None = None) -> None:
        """Squared norm of (part of, bucket ``bucket``) the averaged gradient of ``step``."""

    def observe_loss(self, step: int, loss: float) -> None:
        """This rank's training loss of ``step`` (``CompressionState.observe_loss``): an
        adaptive policy checks its decisions against it. Each rank reports its own local
        loss, every step or at least every few steps."""

    def update(self, comm: Communicator, step: int, *, plain: str | None = None,
               hierarchy: str = "auto") -> bool:
        """At the start of ``step``, nothing in flight: decide when due (collective on
        every rank alike). True if the decisions changed. ``plain``: the algorithm of
        uncompressed groups (None: the communicator's engine); ``hierarchy``: how the
        caller's compressed calls cross hosts (``collectives.allreduce``'s)."""
        return False

    # -- state and reporting ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def table(self, layers: list[Layer] | None = None) -> str:
        """The decisions as a text table: layer, numel, compressor (of ``layers``, else of
        the layers :meth:`bind` got)."""
        layers = self.layers if layers is None else layers
        if layers is None:
            return (f"(no layers yet: {type(self).__name__} is bound to a model by "
                    f"CompressionState(...).bind(model), or pass them: table(layers))")
        rows = [(lay.name, lay.numel, self.choose(lay)) for lay in layers]
        width = max([len(r[0]) for r in rows] + [5])
        lines = [f"{'layer':<{width}} {'numel':>10}  compressor"]
        lines += [f"{n:<{width}} {k:>10}  {short(c)}" for n, k, c in rows]
        return "\n".join(lines)


class Fixed(Policy):
    """One compressor for every layer."""

    def __init__(self, spec: Any) -> None:
        self.spec = canonical(spec)
        self.instance = spec if isinstance(spec, compressors.Compressor) else None

    def choose(self, layer: Layer) -> str:
        return self.spec

    def instances(self) -> dict[str, compressors.Compressor]:
        return {} if self.instance is None else {self.spec: self.instance}

    def choices(self) -> frozenset[str]:
        return frozenset({self.spec})

    def describe(self) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"Fixed({self.spec!r})"

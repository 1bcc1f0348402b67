"""The policy interface: which compressor each layer gets."""

from __future__ import annotations

import dataclasses
from typing import Any

import compressors

from .layers import Layer


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

    Static policies implement ``choose``. Adaptive ones also set ``adaptive = True`` and
    implement ``wants_profile``/``observe``/``observe_norm``/``update`` (see ``AutoPolicy``).
    """

    adaptive = False

    def choose(self, layer: Layer) -> str:
        raise TypeError(f"{type(self).__name__} does not implement choose(layer)")

    def wants_norm(self, step: int) -> bool:
        """Whether an adaptive policy wants ``step``'s gradient norms (``observe_norm``)."""
        return self.adaptive

    def choose_bucket(self, layers: list[Layer]) -> list[str]:
        """The compressor of each layer of one DDP bucket, in its order (``choose`` each,
        unless the policy groups a bucket's layers)."""
        return [self.choose(lay) for lay in layers]

    def bind(self, layers: list[Layer]) -> None:
        """Check the policy against the model's layers (called once the model is known)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def table(self, layers: list[Layer]) -> str:
        """The decisions as a text table: layer, numel, compressor."""
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

    def __repr__(self) -> str:
        return f"Fixed({self.spec!r})"

"""Per-layer compressor policies: rules, a fixed table, and an automatic selector.

``as_policy`` turns what a user passes (a spec string, a Compressor, a list of rules, a dict
table, "auto" with its parameters or a Policy) into a :class:`Policy`.

Example::

    from collectives.policy import AutoPolicy, Rules
    rules = Rules([("numel<16384", "none"), ("kind=embedding", "topk:ratio=0.01"),
                   ("*", "uniform:bits=4")])
    auto = AutoPolicy(max_error=0.2, every=200)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import compressors
from compressors.base import described, parse_spec

from .auto import AutoConfig, AutoPolicy
from .base import Fixed, Policy, canonical
from .dp import solve
from .layers import KINDS, Layer, layer_of, model_layers
from .rules import Rules, Table

__all__ = ["KINDS", "AutoConfig", "AutoPolicy", "Fixed", "Layer", "Policy", "Rules", "Table",
           "as_policy", "auto_config", "auto_parameters", "canonical", "layer_of",
           "model_layers", "solve"]


def as_policy(policy: Any) -> Policy:
    """A Policy from a compressor spec (or alias, ``compressors.aliases()``), a Compressor,
    [(condition, spec), ...], {name: spec}, "auto" (with :class:`AutoConfig` parameters in
    the spec: ``"auto:max_error=0.1,every=200"``, see :func:`auto_parameters`), or a Policy.
    Raises ValueError naming what is wrong and what would work.

    Example::

        >>> from collectives.policy import as_policy
        >>> assert as_policy("auto:max_error=0.1").config.max_error == 0.1
        >>> assert as_policy("int8").spec.startswith("uniform:bits=8")
    """
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        name = policy.partition(":")[0].strip()
        if name == "auto":
            return AutoPolicy(auto_config(policy))
        if name not in compressors.available() and name not in compressors.aliases():
            raise ValueError(f"unknown policy or compressor {name!r} in {policy!r}; a policy "
                             f"spec is {_POLICIES}, or a compressor spec whose name is one of: "
                             f"{described()}")
    if isinstance(policy, str | compressors.Compressor):
        return Fixed(policy)
    if isinstance(policy, Mapping):
        table = dict(policy)
        default = table.pop("*", None)
        return Table(table, default)
    if isinstance(policy, list | tuple):
        return Rules(policy)
    raise ValueError(f"policy must be a compressor spec, a Compressor, a list of (condition, "
                     f"spec) rules, a {{name: spec}} table, {_POLICIES} or a Policy; got "
                     f"{type(policy).__name__}")


def auto_parameters() -> list[str]:
    """The :class:`AutoConfig` fields an ``"auto:key=value,..."`` spec may set: every one but
    ``candidates`` (a list: pass ``AutoPolicy(candidates=[...])``) and ``tunables`` (an
    object: pass ``AutoPolicy(tunables=Tunables(...))``)."""
    return [f.name for f in dataclasses.fields(AutoConfig)
            if f.name not in ("candidates", "tunables")]


_POLICIES = (f"'auto' or 'auto:key=value,...' with key in {', '.join(auto_parameters())} "
             f"(candidates through AutoPolicy(candidates=[...]))")


def auto_config(spec: str) -> AutoConfig:
    """The :class:`AutoConfig` of an ``"auto"`` or ``"auto:max_error=0.1,every=200"`` spec
    (each value read as its field's type); ValueError naming a parameter it cannot set."""
    _, given = parse_spec(spec, raw=True)
    fields = {f.name: f for f in dataclasses.fields(AutoConfig)}
    options: dict[str, Any] = {}
    for key, text in given.items():
        if key == "candidates":
            raise ValueError(f"{spec!r}: candidates is a list and cannot be written in a spec; "
                             f"pass AutoPolicy(candidates=[...], ...) or "
                             f"AutoPolicy(AutoConfig(candidates=[...], ...))")
        if key == "tunables":
            raise ValueError(f"{spec!r}: tunables is an object and cannot be written in a spec; "
                             f"pass AutoPolicy(tunables=Tunables(...), ...)")
        if key not in fields:
            raise ValueError(f"{spec!r}: auto has no parameter {key!r}; it takes "
                             f"{', '.join(auto_parameters())}")
        options[key] = _field_value(spec, key, fields[key].default, text)
    return AutoConfig(**options)


def _field_value(spec: str, key: str, default: Any, text: str) -> Any:
    """``text`` as the type of the field's default (text for a field whose default is None)."""
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else \
            "an integer" if isinstance(default, int) else "a number"
        raise ValueError(f"{spec!r}: {key} must be {kind}, got {text!r}") from None
    return text

"""Per-layer compressor policies: rules, a fixed table, and an automatic selector.

``as_policy`` turns what a user passes (a spec string, a Compressor, a list of rules, a dict
table or a Policy) into a :class:`Policy`.

Example::

    from collectives.policy import AutoPolicy, Rules
    rules = Rules([("numel<16384", "none"), ("kind=embedding", "topk:ratio=0.01"),
                   ("*", "uniform:bits=4")])
    auto = AutoPolicy(max_error=0.2, every=200)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import compressors

from .auto import AutoConfig, AutoPolicy
from .base import Fixed, Policy, canonical
from .dp import solve
from .layers import KINDS, Layer, layer_of, model_layers
from .rules import Rules, Table

__all__ = ["KINDS", "AutoConfig", "AutoPolicy", "Fixed", "Layer", "Policy", "Rules", "Table",
           "as_policy", "canonical", "layer_of", "model_layers", "solve"]


def as_policy(policy: Any) -> Policy:
    """A Policy from a spec string, a Compressor, [(condition, spec), ...], {name: spec},
    "auto", or a Policy. Raises ValueError naming what is wrong."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str) and policy.strip() == "auto":
        return AutoPolicy()
    if isinstance(policy, str | compressors.Compressor):
        return Fixed(policy)
    if isinstance(policy, Mapping):
        table = dict(policy)
        default = table.pop("*", None)
        return Table(table, default)
    if isinstance(policy, list | tuple):
        return Rules(policy)
    raise ValueError(f"policy must be a compressor spec, a Compressor, a list of (condition, "
                     f"spec) rules, a {{name: spec}} table, 'auto' or a Policy; got "
                     f"{type(policy).__name__}")

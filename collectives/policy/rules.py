"""Rule-based policies: the first matching rule names the compressor, or a fixed table.

A condition is ``*`` or conditions joined by ``&``:

    numel<N  numel<=N  numel>N  numel>=N   size thresholds (N may be written 16384 or 1e6)
    kind=K                                 K in 1d, embedding, conv, linear, other
    name~REGEX                             re.search on the parameter's name

Example::

    Rules([("numel<16384", "none"), ("kind=embedding", "topk:ratio=0.01"),
           ("*", "uniform:bits=4")])
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .base import Policy, canonical
from .layers import KINDS, Layer, clean_name

Test = Callable[[Layer], bool]
_CMP = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
        "==": operator.eq, "=": operator.eq}
_NUMEL = re.compile(r"^numel\s*(<=|>=|==|<|>|=)\s*(\S+)$")


def _number(text: str, cond: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"rule {cond!r}: {text!r} is not a number") from None
    if value < 0 or value != int(value):
        raise ValueError(f"rule {cond!r}: the size must be a whole number >= 0, got {text}")
    return int(value)


def _term(term: str, cond: str) -> Test:
    term = term.strip()
    if term == "*":
        return lambda layer: True
    m = _NUMEL.match(term)
    if m:
        cmp, n = _CMP[m.group(1)], _number(m.group(2), cond)
        return lambda layer: cmp(layer.numel, n)
    if term.startswith("kind="):
        kind = term[5:].strip()
        if kind not in KINDS:
            raise ValueError(f"rule {cond!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
        return lambda layer: layer.kind == kind
    if term.startswith("name~"):
        try:
            rx = re.compile(term[5:].strip())
        except re.error as exc:
            raise ValueError(f"rule {cond!r}: bad regular expression: {exc}") from None
        # A shared parameter matches under any of its names (``lm_head.weight`` is the tied
        # ``wte.weight``).
        return lambda layer: any(rx.search(n) is not None for n in layer.names)
    raise ValueError(f"rule {cond!r}: cannot read {term!r}; expected '*', numel<N (<=, >, >=), "
                     "kind=K or name~REGEX, joined by '&'")


def parse_condition(cond: str) -> Test:
    """A predicate on layers from a condition string (see the module doc)."""
    if not isinstance(cond, str) or not cond.strip():
        raise ValueError(f"a rule's condition must be a non-empty string, got {cond!r}")
    tests = [_term(t, cond) for t in cond.split("&")]
    return lambda layer: all(t(layer) for t in tests)


class Rules(Policy):
    """Ordered (condition, compressor spec) rules; the first that matches a layer decides."""

    def __init__(self, rules: Iterable[tuple[str, Any]]) -> None:
        self.rules: list[tuple[str, str]] = []
        self._tests: list[Test] = []
        for item in rules:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise ValueError(f"a rule is a (condition, compressor) pair, got {item!r}")
            cond, spec = item
            self._tests.append(parse_condition(cond))
            self.rules.append((cond, canonical(spec)))
        if not self.rules:
            raise ValueError("Rules needs at least one rule (end with ('*', spec))")

    def choose(self, layer: Layer) -> str:
        for test, (_, spec) in zip(self._tests, self.rules, strict=True):
            if test(layer):
                return spec
        raise ValueError(f"no rule matches layer {layer.name!r} (numel={layer.numel}, kind="
                         f"{layer.kind}); add a catch-all ('*', spec) rule")

    def bind(self, layers: list[Layer]) -> None:
        for layer in layers:
            self.choose(layer)
        super().bind(layers)

    def __repr__(self) -> str:
        return f"Rules({self.rules!r})"

    def choices(self) -> frozenset[str]:
        return frozenset(spec for _, spec in self.rules)

    def describe(self) -> str:
        return "rules " + "; ".join(f"{cond} -> {spec}" for cond, spec in self.rules)


class Table(Policy):
    """A fixed table: parameter name -> compressor spec, with an optional default.

    A key may name a parameter under any of its names: torch.compile's ``_orig_mod.`` parts
    are dropped, and a shared parameter answers to each module's name for it.
    """

    def __init__(self, table: Mapping[str, Any], default: Any = None) -> None:
        self.specs = {clean_name(str(k)): canonical(v) for k, v in table.items()}
        self.default = None if default is None else canonical(default)

    def choices(self) -> frozenset[str]:
        return frozenset(self.specs.values()) | ({self.default} if self.default else set())

    def describe(self) -> str:
        rows = [f"{name} -> {spec}" for name, spec in sorted(self.specs.items())]
        return "table " + "; ".join(rows + [f"* -> {self.default}"])

    def choose(self, layer: Layer) -> str:
        specs = {self.specs[n] for n in layer.names if n in self.specs}
        if len(specs) > 1:
            raise ValueError(f"the table gives parameter {layer.name!r} (also named "
                             f"{', '.join(layer.aliases)}) different compressors under its "
                             f"names: {sorted(specs)}; give it one")
        spec = specs.pop() if specs else self.default
        if spec is None:
            raise ValueError(f"layer {layer.name!r} is not in the table and there is no "
                             "default; pass default='none' (or another spec)")
        return spec

    def bind(self, layers: list[Layer]) -> None:
        unknown = set(self.specs) - {n for layer in layers for n in layer.names}
        if unknown:
            raise ValueError(f"the table names parameters the model does not have: "
                             f"{sorted(unknown)}")
        for layer in layers:
            self.choose(layer)
        super().bind(layers)

    def __repr__(self) -> str:
        return f"Table({self.specs!r}, default={self.default!r})"

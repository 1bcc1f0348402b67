"""The automatic policy's parts: the fields each keeps in ``AutoPolicy.state_dict``."""

from __future__ import annotations

import copy
from typing import Any


class Part:
    """A part whose ``KEYS`` (state_dict key: attribute) are saved and restored as they are.

    The parts share one flat state_dict, so each key names one part's field; a key absent
    from an older state_dict leaves the field as it is.
    """

    KEYS: dict[str, str] = {}

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, attr) for key, attr in self.KEYS.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, attr in self.KEYS.items():
            if key in state:
                setattr(self, attr, state[key])


class Kept:
    """An attribute of the policy that one of its parts keeps (read and written there):
    ``decisions = Kept("_decider")`` is the part ``_decider``'s ``decisions``."""

    def __init__(self, part: str) -> None:
        self.part = part

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class Whole:
    """A policy made of parts (``_parts``): its state_dict is one flat dict of the log,
    ``cached`` and each part's fields."""

    log: list[dict[str, Any]]
    cached: bool

    def _parts(self) -> tuple[Part, ...]:
        return ()

    def state_dict(self) -> dict[str, Any]:
        """One flat dict: the log, ``cached`` and each part's fields (see ``Part``)."""
        state: dict[str, Any] = {"log": self.log, "cached": self.cached}
        for part in self._parts():
            state.update(part.state_dict())
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self.log, self.cached = state.get("log", self.log), state.get("cached", self.cached)
        for part in self._parts():
            part.load_state_dict(state)

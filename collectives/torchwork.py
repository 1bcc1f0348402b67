"""torch.distributed ``Work`` objects made from futures: what the compcoll backend's
collectives and the FSDP2 reduce-scatter hand back to torch.

torch has no public constructor for a ``Work`` that completes with a future; its C++ binding
``_create_work_from_future`` is the one torch's own Python process groups use. Kept here, in
one place, so that a torch release that renames it breaks one module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def from_future(fut: Any) -> Any:
    """A ``Work`` that is done when ``fut`` is, with ``fut``'s value as its result."""
    from torch._C._distributed_c10d import _create_work_from_future

    return _create_work_from_future(fut)


def then(work: Any, after: Callable[[], Any]) -> Any:
    """A ``Work`` done once ``work`` is done and ``after()`` has run (its value is
    ``work``'s)."""
    return from_future(work.get_future().then(lambda f: (f.value(), after())[0]))

"""Keywords that moved: a call passing one gets a TypeError naming it and where its setting
went, not Python's bare "unexpected keyword argument".

Each door that once took a keyword lists it here, with its new home, in one table; the door
checks with :func:`refuse` (where it gathers unknown keywords itself) or :func:`keywords` (a
decorator that keeps the door's own signature).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_GTOPK = "gtopk's k is written in its algorithm now"
_WAITS = ("like torch's optimizers it waits as long as its process group (the group's own "
          "timeout on a torch.distributed group, else collectives.defaults.timeout); set the "
          "attribute after construction (opt.timeout = 60.0) to choose another")

#: door -> {keyword: where its setting went}
MOVED: dict[str, dict[str, str]] = {
    "allreduce": {"k": f"{_GTOPK}: sparse_algorithm='gtopk:k=N'"},
    "Compression": {"k": f"{_GTOPK}: Compression(..., sparse_algorithm='gtopk:k=N')"},
    "sparse_allreduce": {"k": f"{_GTOPK}: algorithm='gtopk:k=N'"},
    "CompressionState": {
        "hierarchy": "it moved to Session(hierarchy=...), given as the policy: "
                     "CompressionState(policy=Session(spec, hierarchy='flat'))",
        "comm": "it moved to process_group=, which takes an mpi4py communicator (or a "
                "collectives.Communicator) as well as a torch process group",
    },
    "OneBitAdam": {
        "warmup_compressor": "it moved into compressor=, a pair (warm-up, after the freeze) "
                             "such as compressor=('none', 'sign')",
        "timeout": _WAITS,
    },
    "DiLoCo": {
        "timeout": _WAITS,
        "max_comm_share": "the background exchange hides the sync (overlap=True), and in "
                          "the foreground the interval keeps syncs within "
                          "collectives.optim.intervals.MAX_COMM_SHARE of the time",
    },
}


def refuse(door: str, given: Iterable[str]) -> None:
    """TypeError for the first of the keywords ``given`` that ``door`` no longer takes,
    naming it and where its setting went; nothing for the others."""
    table = MOVED[door]
    for key in given:
        if key in table:
            raise TypeError(f"{door}() no longer takes {key}=: {table[key]}")


def keywords(door: str) -> Callable[[F], F]:
    """Decorate ``door``'s function (or ``__init__``) so a keyword it no longer takes raises
    :func:`refuse`'s TypeError; its signature and docstring stay its own."""
    def wrap(func: F) -> F:
        @functools.wraps(func)
        def checked(*args: Any, **kw: Any) -> Any:
            if kw:
                refuse(door, kw)
            return func(*args, **kw)
        return checked  # type: ignore[return-value]
    return wrap

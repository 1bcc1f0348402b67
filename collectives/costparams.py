"""The cost model's parameters: the flat link, a link class inside hosts and one across them,
the reduction speed and the hosts they were fitted on (plain data, importing nothing).

A link class is what one rank sees while every rank of the collective uses that class at once:
``intra`` inside a host (every host at once), ``cross`` across hosts (each rank with the ranks
of its local index on the other hosts, every local index at once). Where the L ranks of a host
share one uplink (one NIC per host, and the emulated cluster), each of them gets 1/L of it
while all cross at once: cross beta = L * b_nic. The flat link (alpha, beta) is the slowest
hop of a flat algorithm's step on the communicator, as measured there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


def _check(name: str, value: float) -> None:
    if not value >= 0:  # also refuses NaN
        raise ValueError(f"{name} must be >= 0, got {value}")


def several_per_host(sizes: tuple[int, ...]) -> bool:
    """Whether hosts of ``sizes`` ranks (ranks per host, in host order) are where a call may
    run two-level on its own ("auto"): several hosts of the same size, more than one rank
    each (one host has nothing to cross, one rank per host nothing to reduce inside it, and
    shards of unequal hosts would not line up).

    Example::

        >>> from collectives.costparams import several_per_host
        >>> several_per_host((2, 2)), several_per_host((4,)), several_per_host((1, 1, 1))
        (True, False, False)
    """
    return len(sizes) > 1 and len(set(sizes)) == 1 and sizes[0] > 1


@dataclass(frozen=True)
class Link:
    """One link class: seconds per message (alpha) and seconds per byte (beta)."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        _check("alpha", self.alpha)
        _check("beta", self.beta)


@dataclass(frozen=True, init=False)
class CostParams:
    """Fitted machine parameters (seconds, seconds per byte).

    ``alpha``, ``beta``: the flat communicator's link (what every flat algorithm pays);
    ``gamma``: the reduction's time per byte. ``intra``, ``cross``: the link classes inside
    and across hosts (None where not fitted: the flat link stands in). ``hosts``: ranks per
    host of the communicator they were fitted on, in host order (empty: one host).

    Only alpha, beta and gamma are dataclass fields, so a saved fit (``dataclasses.asdict``)
    holds the flat link as it always did; the classes and the hosts are keywords, compared,
    hashed and shown with the fields.

    Example::

        >>> from collectives.costparams import CostParams, Link
        >>> c = CostParams(20e-6, 8e-9, 1e-10, intra=Link(2e-6, 1e-10),
        ...                cross=Link(20e-6, 16e-9), hosts=(2, 2))
        >>> c.layout(4), c.on("cross").beta, c.on("intra").hosts
        ((2, 2), 1.6e-08, ())
    """

    alpha: float
    beta: float
    gamma: float

    def __init__(self, alpha: float, beta: float, gamma: float, intra: Link | None = None,
                 cross: Link | None = None, hosts: tuple[int, ...] = ()) -> None:
        for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
            _check(name, value)
        hosts = tuple(int(h) for h in hosts)
        if any(h < 1 for h in hosts):
            raise ValueError(f"hosts must hold positive rank counts, got {hosts}")
        for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma),
                            ("intra", intra), ("cross", cross), ("hosts", hosts)):
            object.__setattr__(self, name, value)

    if TYPE_CHECKING:  # set in __init__; not dataclass fields (see the docstring)
        intra: Link | None
        cross: Link | None
        hosts: tuple[int, ...]

    @property
    def key(self) -> tuple:
        """Every field, flat link and keywords: what equality and the hash compare."""
        return (self.alpha, self.beta, self.gamma, self.intra, self.cross, self.hosts)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, CostParams) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in (("intra", self.intra), ("cross", self.cross),
                                                   ("hosts", self.hosts)) if v)
        return f"CostParams(alpha={self.alpha!r}, beta={self.beta!r}, gamma={self.gamma!r}{extra})"

    def layout(self, p: int) -> tuple[int, ...]:
        """Ranks per host of a job of ``p`` ranks: ``hosts`` where they add up to p, else
        hosts as large as the largest fitted one (the last holding what is left), else one."""
        if sum(self.hosts) == p or not self.hosts:
            return self.hosts or (p,)
        per = max(self.hosts)
        full, rest = divmod(p, per)
        return (per,) * full + ((rest,) if rest else ())

    def on(self, level: str, hosts: tuple[int, ...] = ()) -> CostParams:
        """The parameters of a collective that runs on one class only ("intra" or "cross"):
        that class as the flat link (the flat link where it was not fitted), on ``hosts``."""
        link = {"intra": self.intra, "cross": self.cross}[level] or Link(self.alpha, self.beta)
        return CostParams(link.alpha, link.beta, self.gamma,
                          intra=link if level == "intra" else None,
                          cross=link if level == "cross" else None, hosts=hosts)

    @classmethod
    def of_hosts(cls, intra: Link, nic: Link, gamma: float, hosts: tuple[int, ...],
                 shared_nic: bool = True) -> CostParams:
        """Parameters of ranks placed contiguously on ``hosts`` (ranks per host), linked by
        ``intra`` inside a host and by one ``nic`` per host (``shared_nic``; else one per rank).

        Across hosts, the L ranks of a host cross at once in a two-level step: each gets 1/L
        of a shared NIC, cross beta = L * nic.beta. A flat ring step moves one block per rank
        at once and, the ranks of a host being consecutive, only the host's last rank sends
        across (and its first receives): one flow each way per uplink, so the ring's slowest
        hop is max(intra, nic) and the flat link is (max alpha, max beta), without sharing.
        """
        sizes = tuple(int(h) for h in hosts)
        if len(sizes) <= 1:
            return cls(intra.alpha, intra.beta, gamma, intra=intra, hosts=sizes)
        per = max(sizes) if shared_nic else 1
        cross = Link(nic.alpha, per * nic.beta)
        if max(sizes) == 1:
            return cls(nic.alpha, nic.beta, gamma, cross=cross, hosts=sizes)
        return cls(max(intra.alpha, nic.alpha), max(intra.beta, nic.beta), gamma, intra=intra,
                   cross=cross, hosts=sizes)

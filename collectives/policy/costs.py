"""What a collective costs the automatic policy: the link's model and the fixed cost of one.

Each layer's allreduce is priced with the cost model (``plan.price``: ``pricing`` over the
schemes the compressor can use): the one given (``cost``, to plan for another network), else
the one fitted on the communicator at the first decision, kept from then on (a later fit on
busy cores differs, and would flip decisions). The fixed cost of one collective per candidate
is timed once through this stack (``latency``: milliseconds with Python, message rounds and
shared cores, where the model's alpha says microseconds), a round per profiling step and the
rest at the decision; what the stack adds over this machine's modelled latency travels to
any planned network (``latency.fixed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import costmodel
from . import latency as latencies
from . import plan
from .cachefile import loaded_fit
from .part import Part
from .tunables import DEFAULTS, Tunables

if TYPE_CHECKING:
    from ..transport import Communicator

#: The column of the engine's own allreduce in the latency rounds.
ENGINE = "engine"


class Costs(Part):
    """The cost model to price with and each candidate's fixed cost of one collective.

    ``latency`` (checked by ``latency.check``): None measures it, "model" takes the model's
    one-element price, a number or {spec: seconds} is used as it is.
    """

    KEYS = {"measured": "measured", "fitted": "fitted"}

    def __init__(self, candidates: tuple[str, ...], cost: costmodel.CostParams | None,
                 latency: latencies.Latency, tunables: Tunables = DEFAULTS) -> None:
        self.candidates, self.cost, self.latency = candidates, cost, latency
        #: Elements of the timed tensor, and rounds after the warm-up (``latency``).
        self.size, self.repeats = tunables.latency_size, tunables.latency_repeats
        #: What ``latency.measure`` found: ranks, seconds and overhead per candidate.
        self.measured: dict[str, Any] | None = None
        #: The cost model of the link, fitted at the first decision or read with the
        #: measurements.
        self.fitted: costmodel.CostParams | None = None
        self.rounds: list[np.ndarray] = []  # this rank's latency rounds so far (seconds)

    def wants_fit(self) -> bool:
        """Whether pricing needs the model fitted on the communicator."""
        return self.cost is None or self.latency is None

    def model(self, comm: Communicator) -> costmodel.CostParams:
        """The model to price with: ``cost``, else the fitted one (collective on first use)."""
        if self.fitted is None and self.wants_fit():
            self.fitted = costmodel.params(comm)
        cost = self.cost or self.fitted
        assert cost is not None
        return cost

    def needed(self, p: int) -> bool:
        """Whether the fixed costs are still to be measured (for ``p`` ranks)."""
        m = self.measured
        return self.latency is None and (m is None or m["ranks"] != p
                                         or set(m["overhead_s"]) != set(self.candidates))

    def round(self, comm: Communicator, plain: str | None) -> None:
        """One timed call per candidate (collective), while the latencies are wanted:
        ``repeats + 1`` rounds, one per profiling step, the rest at the decision."""
        if self.needed(comm.size) and len(self.rounds) <= self.repeats:
            self.rounds.append(latencies.one_round(comm, self.candidates, plain,
                                                   len(self.rounds), size=self.size,
                                                   engine=True))

    def fixed(self, comm: Communicator, cost: costmodel.CostParams, plain: str | None
              ) -> tuple[list[float], dict[str, float] | None]:
        """Seconds of one collective per candidate under ``cost``, and the seconds measured
        now when this call finished measuring them (collective then), else None."""
        cands, p = self.candidates, comm.size
        if self.latency == "model":
            return [plan.latency(p, spec, cost) for spec in cands], None
        if isinstance(self.latency, Mapping):
            return [self.latency[spec] for spec in cands], None
        if self.latency is not None:
            return [float(self.latency)] * len(cands), None
        seconds = None
        if self.needed(p):
            while len(self.rounds) < self.repeats + 1:
                self.round(comm, plain)
            mine = latencies.nanoseconds(np.stack(self.rounds))
            names = (*cands, ENGINE) if mine.size == len(cands) + 1 else cands
            both = latencies.slowest(comm, names, mine)
            engine_s = both.pop(ENGINE, None)
            ours_s = both["none"] if "none" in both else None
            seconds = latencies.plain_first(both)
            self.rounds = []
            here = self.fitted or costmodel.params(comm)
            self.measured = {"ranks": p, "seconds": seconds,
                             "overhead_s": latencies.overhead(p, seconds, here)}
            if engine_s is not None and ours_s is not None:
                self.measured.update(engine_s=engine_s, ours_s=ours_s)
        assert self.measured is not None
        return latencies.fixed(p, cands, self.measured["overhead_s"], cost), seconds

    def engine_first(self, margin: float) -> bool | None:
        """Whether a bucket sent uncompressed whole goes through the engine's own allreduce
        (DDP's, on the training thread) rather than ours: yes unless ours measured more than
        ``margin`` faster on a small tensor (a slow link's latency: gloo pays several
        milliseconds a collective there where ours pays one); None before it is measured
        (or where the latencies are given, not measured)."""
        m = self.measured
        if not m or m.get("engine_s") is None or m.get("ours_s") is None:
            return None
        return not m["ours_s"] < m["engine_s"] * (1.0 - margin)

    def adopt(self, measured: dict[str, Any] | None, fit: Mapping[str, float] | None) -> None:
        """What the cache held: the measured latencies and the fitted model, if any."""
        if measured is not None:
            self.measured = measured
        if fit is not None:
            self.fitted = loaded_fit(fit)

"""OneBitAdam's checkpoints: torch's optimizer state and its own (the step, the freeze, the
error feedback's residuals), refused where they contradict the optimizer that loads them."""

from __future__ import annotations

from typing import Any

from .onebit_settings import Schedule
from .origin import check_origin

VERSION = 2  # 2: the rank and the refresh schedule saved (a version 1 state still loads)


class Checkpoints:
    """Mixed into :class:`OneBitAdam` (its attributes: comm, t, frozen_at, vnorms, schedule,
    compressor, feedback, freeze_step)."""

    def state_dict(self: Any) -> dict[str, Any]:
        """torch's optimizer state (momenta, v) and this rank's own: the step, the freeze,
        the refresh schedule, the error feedback's residuals, the rank that saved it."""
        out = super().state_dict()  # type: ignore[misc]
        out["onebit"] = {"version": VERSION, "t": self.t, "frozen_at": self.frozen_at,
                         "vnorms": list(self.vnorms), "compressor": self.compressor,
                         "world_size": self.comm.size, "rank": self.comm.rank,
                         "refresh": self.schedule.spec, "feedback": self.feedback.state_dict()}
        return out

    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        """Load a state this rank saved. Refused (ValueError naming both sides): another
        compressor, world size or rank; a freeze the constructor's ``freeze_step``
        contradicts (the state frozen at another step, or not frozen past it): the state's
        freeze is never silently taken over the constructor's, nor the other way round; a
        ``refresh`` that would have refreshed v at other steps by the state's step. A state
        of version 1 (no rank, no refresh: it never refreshed) loads where those agree."""
        state = dict(state_dict)
        mine = state.pop("onebit", None)
        if not isinstance(mine, dict) or mine.get("version") not in (1, VERSION):
            raise ValueError(f"not a OneBitAdam state_dict of version {VERSION} (no 'onebit' "
                             "entry: a torch.optim.Adam state starts the warm-up from step 0)")
        _check_state(self, mine)
        super().load_state_dict(state)  # type: ignore[misc]
        self.feedback.load_state_dict(mine["feedback"])
        self.t, self.frozen_at = int(mine["t"]), mine["frozen_at"]
        self.vnorms = [float(x) for x in mine["vnorms"]]
        self._flat_frozen = self._vector_denoms = None
        self._wire = self._avg = None


def _check_state(opt: Any, mine: dict[str, Any]) -> None:
    """ValueError where the saved state ``mine`` contradicts the optimizer ``opt``."""
    check_origin("OneBitAdam", mine, opt.compressor, opt.comm)
    t, frozen, step = int(mine["t"]), mine["frozen_at"], opt.freeze_step
    if step != "auto" and frozen is not None and frozen != step:
        raise ValueError(f"OneBitAdam state_dict froze v at step {frozen}, this optimizer's "
                         f"freeze_step={step}: pass freeze_step={frozen} (or 'auto') to resume "
                         "it")
    if step != "auto" and frozen is None and t >= step:
        raise ValueError(f"OneBitAdam state_dict is at step {t} with v not frozen, this "
                         f"optimizer's freeze_step={step} would have frozen it at step {step}: "
                         f"pass a freeze_step above {t} (or 'auto') to resume it")
    saved = Schedule.of(refresh=mine.get("refresh", "never"))
    then, now = saved.refreshed(t, frozen), opt.schedule.refreshed(t, frozen)
    if then != now:
        raise ValueError(f"OneBitAdam state_dict was saved with refresh={saved.spec!r} (v "
                         f"refreshed at steps {then} by step {t}), this optimizer's "
                         f"refresh={opt.schedule.spec!r} would have refreshed it at {now}: "
                         f"pass refresh={saved.spec!r} to resume it")

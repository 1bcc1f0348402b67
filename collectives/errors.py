"""Every exception compcoll raises, in one small hierarchy.

``CompcollError`` is the root. Programming errors (bad dtype, op, algorithm name) are plain
``ValueError``/``TypeError`` so they read as such; everything that happens between ranks is a
``CommunicationError``.
"""

from __future__ import annotations


class CompcollError(Exception):
    """Root of every error compcoll raises on purpose."""


class CommunicationError(CompcollError):
    """Something went wrong between ranks (transport failure, mismatch, timeout)."""


class TransportError(CommunicationError):
    """The underlying engine (MPI, torch.distributed) reported an error."""


class MismatchError(CommunicationError, ValueError):
    """Ranks called the same collective with incompatible arguments (count, dtype, op, ...)."""


class CollectiveTimeout(CommunicationError, TimeoutError):
    """A blocking wait passed its deadline.

    The message names the collective, the step and the peer the rank was waiting for, so that a
    dead or stuck rank can be found from any survivor's traceback.
    """

    def __init__(self, collective: str, step: str, peer: int | None, timeout: float) -> None:
        who = f"rank {peer}" if peer is not None else "the other ranks"
        super().__init__(
            f"{collective}: no progress for {timeout:.3g} s at step {step!r} while waiting for "
            f"{who}; that rank may have died, be stuck, or be calling a different collective "
            f"(raise the deadline with timeout=... or COMPCOLL_TIMEOUT if the step is just slow)"
        )
        self.collective = collective
        self.step = step
        self.peer = peer
        self.timeout = timeout


class CommunicatorUnusable(CommunicationError):
    """The communicator failed earlier (a timeout or an engine error) and refuses every call.

    When a wait gives up, the ranks may stand at different points of the collective sequence,
    and messages of the abandoned collective may still arrive: the engine keeps writing into
    the receive buffers it was given. Those buffers are kept alive, but the communicator can
    no longer be trusted to match messages, so every later call on it raises this error.
    ``cause`` is the original error.
    """

    def __init__(self, communicator: str, cause: BaseException) -> None:
        super().__init__(
            f"{communicator} is unusable since an earlier collective failed on it "
            f"({type(cause).__name__}: {cause}); its ranks may be at different points of the "
            f"collective sequence. Abort the job (comm.abort(), or let the exception end this "
            f"rank) and restart from a checkpoint, or have every rank build a new communicator "
            f"(MPI: comm.Dup(); torch.distributed: dist.new_group(...)) to go on"
        )
        self.cause = cause

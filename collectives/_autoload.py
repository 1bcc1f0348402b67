"""Registers the ``compcoll`` torch.distributed backend when torch is imported (the
``torch.backends`` entry point): cheap, and never an error that would break ``import torch``.

Nothing is configured here: no ``COMPCOLL_*`` variable is read, and a failure to register is
logged (at debug level), not raised. The backend itself (:mod:`collectives.backend`) is
imported when a group is created; that is when its settings are read and a bad one is
refused, naming its variable.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any


def register() -> None:
    """Register the backend's creator under the name ``compcoll`` (idempotent)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and "compcoll" not in dist.Backend.backend_list:
            dist.Backend.register_backend("compcoll", create, devices=["cpu"])
    except Exception as exc:  # noqa: BLE001 - a failed plugin must not break import torch
        logging.getLogger(__name__).debug("compcoll backend not registered: %s", exc)


def create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """torch.distributed's creator: a :class:`collectives.backend.CompressedProcessGroup`."""
    from .backend import create as make

    return make(store, rank, size, timeout)

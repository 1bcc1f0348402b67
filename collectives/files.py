"""Small files compcoll keeps between runs (the policy's measurements, crossover tables)."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path


def write_atomic(path: Path, data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it, so that a reader
    never sees half a file; a failure is a warning naming ``what`` and why."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=path.name,
                                         suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        warnings.warn(f"{what} {path} not written ({exc})", stacklevel=3)

"""The installed distribution's version (``compcoll --version``, ``collectives.__version__``)."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("compcoll")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

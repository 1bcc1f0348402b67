"""The ``compcoll`` subcommands: what each does, an example, and the module that defines it.

A command's module registers its runner and options (``registry.command``) when imported, and is
imported only when that command runs or lists its options: ``compcoll --version`` and
``compcoll -h`` load none of them (the training commands load torch).
"""

from __future__ import annotations

import importlib

from ..registry import CATALOG


def load(name: str) -> None:
    """Import the module of the command ``name`` (which registers it)."""
    importlib.import_module(f"{__name__}.{CATALOG[name].module}")

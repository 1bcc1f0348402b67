"""Sphinx configuration of compcoll's reference site.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (warnings are errors).
The API pages are generated from the docstrings of the installed (or source-tree) packages;
the command-line reference from ``compcoll_bench.cli.build_parser()``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The source tree first: the library, and the lab (bench/compcoll_bench) that holds the CLI.
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(Path(__file__).resolve().parent / "_ext")]
# Importing torch must not register compcoll's backend through the entry point of a stale
# installation; collectives.backend registers itself when autodoc imports it.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from collectives import __version__  # noqa: E402

project = "compcoll"
author = "compcoll developers"
copyright = "compcoll developers"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "plain_docstrings",
    "registry_tables",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]

# Markdown: $...$ math, and anchors for ## and ### headings (links like page.md#a-heading).
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

# Docstrings: Google style ("Args:", "Returns:"); their "Example::" blocks stay literal text
# (the test suite runs them: tests/test_examples.py).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True}
autodoc_preserve_defaults = True

html_theme = "furo" if importlib.util.find_spec("furo") else "alabaster"
html_title = f"compcoll {release}"
html_static_path: list[str] = []

# Command-line reference: section titles name the whole command ("compcoll bench allreduce").
sphinxarg_full_subcommand_name = True


"""Session setup: the automatic policy's measurement cache goes to a temporary directory."""

from __future__ import annotations

import os
import shutil
import tempfile


def pytest_configure(config) -> None:
    # Never the user's ~/.cache; ranks launched by the tests inherit the variable.
    path = tempfile.mkdtemp(prefix="compcoll-cache-")
    os.environ["COMPCOLL_CACHE_DIR"] = path
    config.add_cleanup(lambda: shutil.rmtree(path, ignore_errors=True))

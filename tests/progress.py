"""A pytest plugin for long quiet runs (``make test`` loads it: ``-p tests.progress``).

``-q`` prints dots, and a log that shows whole lines only (CI's) shows nothing until a test
file ends, minutes on the multi-rank files. This writes a line of its own as a test starts
once ``EVERY`` seconds have passed since the last one: the time so far, how many tests are
done of how many, and the test starting. Lines are written between tests only, so a test that
runs longer than ``EVERY`` (each multi-rank run has a hard timeout) leaves a gap, and the
line written as it started names it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

#: Seconds between progress lines.
EVERY = 60.0


class Progress:
    """Counts finished tests and writes a line when ``EVERY`` seconds have passed."""

    def __init__(self, config: pytest.Config, every: float | None = None) -> None:
        self.config, self.every = config, EVERY if every is None else every
        self.start = self.last = time.monotonic()
        self.total = self.done = 0

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every

    def line(self, what: str) -> str:
        self.last = now = time.monotonic()
        minutes, seconds = divmod(int(now - self.start), 60)
        return f"[{minutes}m{seconds:02d}s] {self.done}/{self.total} tests done; {what}"

    def write(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        writer = getattr(reporter, "_tw", None)  # (its column: -q's dots end no line)
        if writer is not None and writer.width_of_current_line:
            reporter.write("\n")
        reporter.write_line(text)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        self.total = len(items)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.due():
            self.write(self.line(f"running {nodeid}"))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.done += 1


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Progress(config), "compcoll-progress")

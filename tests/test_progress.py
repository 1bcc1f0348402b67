"""``make test``'s progress lines (``tests/progress.py``): one as a test starts once a minute
has passed, saying the time so far, the tests done and the test starting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests import progress

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plugin(monkeypatch) -> tuple[progress.Progress, list[str], Clock]:
    clock, written = Clock(), []
    monkeypatch.setattr(progress.time, "monotonic", clock)
    reporter = SimpleNamespace(write_line=written.append)
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: reporter))
    plugin = progress.Progress(config)  # type: ignore[arg-type]
    plugin.pytest_collection_modifyitems(items=[object()] * 30)
    return plugin, written, clock


def test_a_line_once_a_minute_names_the_test_starting(monkeypatch) -> None:
    plugin, written, clock = _plugin(monkeypatch)
    for i in range(10):  # 10 tests in 50 s: no line
        plugin.pytest_runtest_logstart(f"t.py::a{i}", None)
        clock.now += 5
        plugin.pytest_runtest_logfinish(f"t.py::a{i}", None)
    assert written == []
    clock.now += 15  # 65 s since the start
    plugin.pytest_runtest_logstart("tests/test_mpi.py::test_matrix[5]", None)
    assert written == ["[1m05s] 10/30 tests done; running tests/test_mpi.py::test_matrix[5]"]
    clock.now += 59
    plugin.pytest_runtest_logfinish("tests/test_mpi.py::test_matrix[5]", None)
    plugin.pytest_runtest_logstart("t.py::b", None)
    assert len(written) == 1  # 59 s since the last line
    clock.now += 1
    plugin.pytest_runtest_logstart("t.py::b", None)
    assert written[-1] == "[2m05s] 11/30 tests done; running t.py::b"


def test_make_test_loads_it_and_pytest_runs_with_it(tmp_path) -> None:
    (tmp_path / "conftest.py").write_text("import tests.progress\n"
                                          "tests.progress.EVERY = 0.0  # a line per test\n")
    (tmp_path / "test_two.py").write_text("def test_one():\n    pass\n\n\n"
                                          "def test_two():\n    pass\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "tests.progress", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [line for line in res.stdout.splitlines() if "tests done" in line]
    assert all(line.startswith("[0m") for line in lines), res.stdout  # not after the dots
    # the test's path is relative to pytest's rootdir, which depends on where tmp_path lies
    done = [line.split("] ", 1)[1] for line in lines]
    assert [d.split("; running ")[0] for d in done] == ["0/2 tests done", "1/2 tests done"]
    wanted = ("test_two.py::test_one", "test_two.py::test_two")
    assert all(d.endswith(w) for d, w in zip(done, wanted, strict=True)), res.stdout
    recipe = subprocess.run(["make", "-n", "test"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT).stdout
    assert "-p tests.progress" in recipe and "--durations=20" in recipe

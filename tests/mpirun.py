"""Launch a script under mpiexec or torchrun with a hard timeout (the whole process group dies
on timeout), launch several in one mpiexec (``Batch``), and read the summary line every
multi-rank script prints on rank 0."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Seconds a batch launch (``Batch``) may take at most.
BATCH_TIMEOUT = 570


def mpiexec() -> str:
    local = Path(sys.executable).with_name("mpiexec")
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if not found:
        raise RuntimeError("mpiexec not found: pip install mpich (or put an MPI on PATH)")
    return found


def start(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in its own session (``finish`` kills the whole group on timeout)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)


def finish(proc: subprocess.Popen, label: str, *, timeout: float) -> subprocess.CompletedProcess:
    """Wait for ``proc``; kill its whole group if it outlives ``timeout``."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{label} hung past {timeout} s (deadlock?)\n{out[-4000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def launch(cmd: list[str], label: str, *, timeout: float,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; kill the whole group if it outlives ``timeout``."""
    return finish(start(cmd, env), label, timeout=timeout)


def run(script: str, np_: int, *args: str, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run tests/mpi/<script> on ``np_`` ranks under mpiexec."""
    cmd = [mpiexec(), "-n", str(np_), sys.executable, str(HERE / "mpi" / script), *args]
    return launch(cmd, f"{script} -n {np_}", timeout=timeout, env=env)


@dataclass(frozen=True)
class Script:
    """One run of tests/mpi/<name> on ``np`` ranks, with its own deadline in seconds."""

    name: str
    np: int
    args: tuple[str, ...] = ()
    timeout: float = 300

    @property
    def label(self) -> str:
        return " ".join((self.name, *self.args))


class Batch:
    """Scripts that share launches: the first ``result`` for a process count runs all the
    scripts added at that count in one mpiexec, one after another, each from a fresh state
    (tests/mpi/batch.py), so the ranks start once instead of once per script. Test modules add
    their scripts as pytest imports them, so a run launches the scripts of the files it
    collected. Each script's part of the output and its exit status (the worst over the ranks)
    come back as if it had run alone; the launch's deadline is the sum of the scripts' (at most
    ``BATCH_TIMEOUT``). ``COMPCOLL_TEST_ALONE=1`` launches each script on its own (does
    running together change an outcome?)."""

    def __init__(self) -> None:
        self.scripts: list[Script] = []
        self.results: dict[Script, subprocess.CompletedProcess] = {}

    def add(self, *scripts: Script) -> None:
        self.scripts += [s for s in scripts if s not in self.scripts]

    def result(self, name: str, np_: int, *args: str) -> subprocess.CompletedProcess:
        [script] = [s for s in self.scripts if (s.name, s.np, s.args) == (name, np_, args)]
        if script not in self.results:
            self._launch([s for s in self.scripts if s.np == np_ and s not in self.results])
        return self.results[script]

    def _launch(self, group: list[Script]) -> None:
        if len(group) == 1 or os.environ.get("COMPCOLL_TEST_ALONE") == "1":
            for s in group:
                self.results[s] = run(s.name, s.np, *s.args, timeout=s.timeout)
            return
        argv = [word for s in group for word in ("--", s.name, *s.args)][1:]
        # Under pytest's own limit (pyproject: 600 s a test), which would leave the ranks up.
        timeout = min(sum(s.timeout for s in group), BATCH_TIMEOUT)
        try:
            res = run("batch.py", group[0].np, *argv, timeout=timeout)
        except AssertionError as hung:  # every script not done by then fails with the note
            res = subprocess.CompletedProcess(argv, -9, str(hung), "")
        for s in group:
            self.results[s] = _part(res, s.label)


#: The suite's shared launches (see ``Batch``).
LAUNCHES = Batch()


def _part(res: subprocess.CompletedProcess, label: str) -> subprocess.CompletedProcess:
    """One script's output and exit status from a batch launch (tests/mpi/batch.py)."""
    out = res.stdout
    start = out.find(f"BATCH START {label}\n")
    end = re.search(rf"^BATCH END {re.escape(label)} exit=(-?\d+)$", out, re.MULTILINE)
    if start < 0 or end is None:
        why = "never started" if start < 0 else "did not end"
        text = (out[start:] if start >= 0 else "") + (
            f"\n{label} {why}: the batch launch ended first, exit {res.returncode}; "
            f"its last output:\n{out[-4000:]}")
        return subprocess.CompletedProcess(res.args, res.returncode or 1, text, "")
    code = int(end.group(1))
    text = out[start:end.end()]
    if res.returncode != 0 and out.count("BATCH START ") == out.count("BATCH END "):
        # every script ended, then the launch failed (at exit?): none is trusted
        code = code or res.returncode
        text += f"\nthe batch launch then exited {res.returncode}:\n{out[end.end():][-4000:]}"
    return subprocess.CompletedProcess(res.args, code, text, "")


def _torchrun_cmd(script: str, nproc: int, *args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node",
            str(nproc), str(HERE / "torchrun" / script), *args]


def torchrun(script: str, nproc: int, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run tests/torchrun/<script> under torchrun (standalone rendezvous)."""
    return launch(_torchrun_cmd(script, nproc, *args), f"torchrun {script}", timeout=timeout,
                  env={"OMP_NUM_THREADS": "1"})


def torchrun_together(script: str, nproc: int, cases: list[str], *,
                      timeout: float) -> dict[str, subprocess.CompletedProcess]:
    """Run tests/torchrun/<script> for each case (its argument) at the same time, each under
    its own torchrun and its own ``timeout``: for cases whose ranks mostly wait out a deadline
    (seconds of sleep each, that one after the other would add up). A run that hangs fails
    its own case only."""
    procs = {case: start(_torchrun_cmd(script, nproc, case), {"OMP_NUM_THREADS": "1"})
             for case in cases}
    deadline = time.monotonic() + timeout  # each has ``timeout`` from its start
    results = {}
    for case, proc in procs.items():
        try:
            results[case] = finish(proc, f"torchrun {script} {case}",
                                   timeout=max(deadline - time.monotonic(), 0.1))
        except AssertionError as hung:
            results[case] = subprocess.CompletedProcess(proc.args, -9, str(hung), "")
    return results


def summary(out: str, name: str) -> tuple[int, int]:
    """(cases, failures) from the line ``NAME: np=P cases=N FAILURES F``."""
    m = re.search(rf"{name}: np=\d+ cases=(\d+) FAILURES (\d+)", out)
    assert m, f"no summary line from {name}:\n{out[-4000:]}"
    return int(m.group(1)), int(m.group(2))


def passed(res: subprocess.CompletedProcess, name: str) -> None:
    """The script exited 0, checked something, and no rank failed."""
    cases, failures = summary(res.stdout, name)
    assert res.returncode == 0 and failures == 0 and cases > 0, res.stdout[-6000:]

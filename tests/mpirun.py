"""Launch a script under mpiexec or torchrun with a hard timeout (the whole process group dies
on timeout), and read the summary line every multi-rank script prints on rank 0."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def mpiexec() -> str:
    local = Path(sys.executable).with_name("mpiexec")
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if not found:
        raise RuntimeError("mpiexec not found: pip install mpich (or put an MPI on PATH)")
    return found


def launch(cmd: list[str], label: str, *, timeout: float,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; kill the whole group if it outlives ``timeout``."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{label} hung past {timeout} s (deadlock?)\n{out[-4000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def run(script: str, np_: int, *args: str, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run tests/mpi/<script> on ``np_`` ranks under mpiexec."""
    cmd = [mpiexec(), "-n", str(np_), sys.executable, str(HERE / "mpi" / script), *args]
    return launch(cmd, f"{script} -n {np_}", timeout=timeout, env=env)


def torchrun(script: str, nproc: int, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run tests/torchrun/<script> under torchrun (standalone rendezvous)."""
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node",
           str(nproc), str(HERE / "torchrun" / script), *args]
    return launch(cmd, f"torchrun {script}", timeout=timeout, env={"OMP_NUM_THREADS": "1"})


def summary(out: str, name: str) -> tuple[int, int]:
    """(cases, failures) from the line ``NAME: np=P cases=N FAILURES F``."""
    m = re.search(rf"{name}: np=\d+ cases=(\d+) FAILURES (\d+)", out)
    assert m, f"no summary line from {name}:\n{out[-4000:]}"
    return int(m.group(1)), int(m.group(2))


def passed(res: subprocess.CompletedProcess, name: str) -> None:
    """The script exited 0, checked something, and no rank failed."""
    cases, failures = summary(res.stdout, name)
    assert res.returncode == 0 and failures == 0 and cases > 0, res.stdout[-6000:]

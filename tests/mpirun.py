"""Launch a script under mpiexec with a hard timeout; the whole process group dies on timeout."""

from __future__ import annotations

import os
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


def run(script: str, np_: int, *args: str, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run tests/mpi/<script> on ``np_`` ranks; kill everything if it outlives ``timeout``."""
    cmd = [mpiexec(), "-n", str(np_), sys.executable, str(HERE / "mpi" / script), *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(
            f"{script} -n {np_} hung past {timeout} s (deadlock?)\n{out[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")

"""DiLoCo (``collectives.optim``) in the training scripts and frameworks users run it in: a
nanoGPT-style script under torchrun at 2 and 4 ranks (the loop of ``tests/torchrun/nanogpt.py``
with the DDP wrap replaced by the optimizer wrap, ``tests/torchrun/nanogpt_diloco.py``), and
PyTorch Lightning's own launcher (``tests/lightning_diloco.py``). Each launch has a hard
timeout."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tests.mpirun import launch, passed, torchrun

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@pytest.mark.mpi
@pytest.mark.parametrize("nproc", [2, 4])
def test_nanogpt_script_with_diloco_trains_checkpoints_and_resumes(tmp_path, nproc: int
                                                                    ) -> None:
    """Syncs every 4 steps at 8 bits with error feedback, rank-0 evaluation on the global
    weights, a checkpoint of every rank's state between two syncs, a bit-exact resume, the
    same global weights on every rank, the loss near plain DDP's."""
    res = torchrun("nanogpt_diloco.py", nproc, str(tmp_path), timeout=240)
    passed(res, "torchrun nanogpt diloco")
    assert res.stdout.count("torchrun nanogpt diloco: np=") == nproc, res.stdout[-4000:]


@pytest.mark.mpi
def test_lightning_launcher_trains_with_diloco_on_an_unwrapped_model(tmp_path) -> None:
    """Lightning's DDP strategy less its DDP wrapper, DiLoCo stepped in ``optimizer_step``
    on a process group of its own: every sync made, the same global weights on both ranks."""
    has_new = importlib.util.find_spec("lightning") is not None
    pytest.importorskip("lightning.pytorch" if has_new else "pytorch_lightning")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = launch([sys.executable, str(HERE / "lightning_diloco.py"), str(tmp_path)],
                 "lightning_diloco.py", timeout=240, env=env)
    passed(res, "lightning diloco")
    # the two ranks share stdout: their summary lines may run together
    lines = re.findall(r"lightning diloco: np=\d+ cases=\d+ FAILURES \d+", res.stdout)
    assert len(lines) == 2 and all(line.endswith("FAILURES 0") for line in lines), \
        res.stdout[-6000:]

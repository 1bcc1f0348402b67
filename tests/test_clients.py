"""The DDP hook in the training scripts and frameworks users run it in, launched the way they
launch them: a nanoGPT-style script under torchrun (2 and 4 ranks), PyTorch Lightning's own
launcher (with :class:`collectives.lightning.CompressionCallback`, and with the ``compcoll``
backend), Hugging Face Accelerate under torchrun. Each run has a hard timeout."""

from __future__ import annotations

import importlib.util
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import collectives.ddp as cddp
from tests.mpirun import launch, passed, summary, torchrun, torchrun_together

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@pytest.mark.mpi
@pytest.mark.parametrize("nproc", [2, 4])
def test_nanogpt_script_with_the_hook_trains_checkpoints_and_resumes(tmp_path, nproc: int
                                                                     ) -> None:
    """Tied embedding named once and sent uncompressed, rank-0 eval and checkpoint while the
    others wait in the hook, a bit-exact resume, the loss tracking plain DDP's."""
    res = torchrun("nanogpt.py", nproc, str(tmp_path), timeout=240)
    passed(res, "torchrun nanogpt")
    assert res.stdout.count("torchrun nanogpt: np=") == nproc, res.stdout[-4000:]


def _lightning() -> Any:
    """``lightning.pytorch`` or ``pytorch_lightning``, whichever is installed (else skip)."""
    has_new = importlib.util.find_spec("lightning") is not None
    return pytest.importorskip("lightning.pytorch" if has_new else "pytorch_lightning")


def _lightning_fit(mode: str, tmp_path: Path) -> subprocess.CompletedProcess:
    _lightning()
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return launch([sys.executable, str(HERE / "lightning_fit.py"), mode, str(tmp_path)],
                  f"lightning_fit.py {mode}", timeout=240, env=env)


def _both_ranks_passed(res: subprocess.CompletedProcess) -> None:
    passed(res, "lightning fit")
    # the two ranks share stdout: their summary lines may run together
    lines = re.findall(r"lightning fit: np=\d+ cases=\d+ FAILURES \d+", res.stdout)
    assert len(lines) == 2 and all(line.endswith("FAILURES 0") for line in lines), \
        res.stdout[-6000:]
    assert summary(res.stdout, "lightning fit")[0] > 0


@pytest.mark.mpi
def test_lightning_callback_compresses_on_cpu_under_lightnings_launcher(tmp_path) -> None:
    """Lightning's DDPStrategy(ddp_comm_hook=...) ignores a hook on the CPU; the callback
    registers ours there: compressed groups on both ranks, the model trained."""
    _both_ranks_passed(_lightning_fit("callback", tmp_path))


@pytest.mark.mpi
def test_lightning_ddp_strategy_runs_on_the_compcoll_backend(tmp_path) -> None:
    _both_ranks_passed(_lightning_fit("compcoll", tmp_path))


def test_lightning_callback_refuses_a_strategy_without_ddp(tmp_path) -> None:
    """One device: Lightning's single-device strategy has no DDP model to hook."""
    L = _lightning()
    from collectives.lightning import CompressionCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):  # noqa: ANN001, ANN202
            return self.lin(batch[0]).square().mean()

        def configure_optimizers(self):  # noqa: ANN202
            return torch.optim.SGD(self.parameters(), 0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 4)))
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path),
                        callbacks=[CompressionCallback("uniform:bits=8")])
    with pytest.raises(RuntimeError, match="SingleDeviceStrategy.*strategy='ddp'"):
        trainer.fit(Tiny(), train_dataloaders=data)


def test_lightning_callback_takes_a_state_or_a_policy_and_pickles() -> None:
    _lightning()

    from collectives.lightning import CompressionCallback

    state = cddp.CompressionState(policy="uniform:bits=4")
    cb = CompressionCallback(state)
    assert cb.state is state and isinstance(cb, CompressionCallback)
    assert CompressionCallback("uniform:bits=8", start_step=3).state.start_step == 3
    with pytest.raises(TypeError, match="not both"):
        CompressionCallback(state, start_step=3)
    back = pickle.loads(pickle.dumps(cb))  # strategy "ddp_spawn" pickles its callbacks
    assert isinstance(back, CompressionCallback) and back.state.policy.spec == state.policy.spec


def test_the_library_imports_without_lightning_and_the_callback_says_what_to_install() -> None:
    code = ("import sys\n"
            "for name in ('lightning', 'pytorch_lightning'):\n"
            "    sys.modules[name] = None  # as if not installed\n"
            "import collectives.lightning as cl\n"
            "try:\n"
            "    cl.CompressionCallback()\n"
            "except ImportError as exc:\n"
            "    assert 'pip install lightning' in str(exc), exc\n"
            "else:\n"
            "    raise AssertionError('no ImportError')\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0 and "ok" in res.stdout, res.stdout + res.stderr


@pytest.mark.mpi
def test_accelerate_prepared_model_takes_the_hook_under_torchrun() -> None:
    pytest.importorskip("accelerate")
    passed(torchrun("accelerate_ddp.py", 2, timeout=180), "torchrun accelerate")


def test_bind_refuses_a_model_not_wrapped_in_ddp() -> None:
    """What Accelerate's ``unwrap_model`` (or a one-process ``prepare``) gives: no DDP, so no
    hook would ever be called."""
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        cddp.CompressionState().bind(torch.nn.Linear(4, 4))


HOOK_DEADLINES = ["group", "env", "arg", "slow"]


@pytest.fixture(scope="module")
def hook_deadlines() -> dict[str, subprocess.CompletedProcess]:
    """The four cases at once: their ranks mostly wait out a deadline (3 to 12 s each)."""
    return torchrun_together("hook_deadline.py", 2, HOOK_DEADLINES, timeout=240)


@pytest.mark.parametrize("case", HOOK_DEADLINES)
def test_the_hook_waits_the_process_groups_timeout_unless_told_otherwise(
        case: str, hook_deadlines: dict[str, subprocess.CompletedProcess]) -> None:
    passed(hook_deadlines[case], f"torchrun hook deadline {case}")

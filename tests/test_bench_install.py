"""How the lab is installed and run: its package name, the distribution's metadata, the setup
script's two modes and where ``make bench`` writes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"


def test_the_lab_installs_under_a_name_of_its_own() -> None:
    """The lab is ``compcoll_bench`` (the ``compcoll`` command's home); no module of a generic
    top-level ``bench`` package exists to collide with a user's; the library imports as
    ``compcoll`` too."""
    code = ("import importlib.util as u\n"
            "from importlib.metadata import entry_points\n"
            "print(u.find_spec('bench.cli') is None,\n"
            "      u.find_spec('compcoll_bench.cli') is not None,\n"
            "      u.find_spec('compcoll') is not None)\n"
            "print(*(e.value for e in entry_points(group='console_scripts', name='compcoll')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "compcoll_bench.cli:main"]
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = config["tool"]["scikit-build"]["wheel"]["packages"]
    assert [Path(p).name for p in packages] == ["compcoll", "collectives", "compressors",
                                                "compcoll_bench"]


def test_pip_show_names_the_license_home_page_and_authors() -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "show", "compcoll"], capture_output=True,
                         text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    fields = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert "Apache-2.0" in (fields.get("License") or fields.get("License-Expression", ""))
    assert fields.get("Home-page", "").startswith("https://")
    assert fields.get("Author") == "compcoll developers"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def _make(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-B", *args], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_bench_writes_to_the_users_folder_not_the_committed_results() -> None:
    recipe = _make("bench", "NP=4")
    assert "compcoll-results/allreduce_shm_np4.json" in recipe
    # then compressed allreduce across emulated hosts (or its forecast), beside the sweep
    assert ("-m compcoll_bench.quickstart -np 4 --link 1gbit --out compcoll-results"
            in recipe)
    assert "bench/results" not in recipe
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/compcoll-results/" in ignored


def test_nvrtc_is_installed_for_the_tests_only() -> None:
    bench, test = _make("bench"), _make("test")
    assert "setup.sh main" in bench and "setup.sh test" not in bench
    assert "setup.sh test" in test
    assert "--dry-run" in SETUP.read_text()  # else the calls below would install for real
    steps = {}
    for mode in ("main", "test"):
        out = subprocess.run(["bash", str(SETUP), mode, "--dry-run"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        steps[mode] = out.stdout.splitlines()
    assert not any("nvrtc" in line for line in steps["main"])
    assert any("nvidia-cuda-nvrtc-cu12" in line for line in steps["test"])
    for mode, lines in steps.items():  # one progress line per step: [i/n] what
        progress = [line for line in lines if line.startswith("[")]
        assert progress[0].startswith("[1/") and "torch" in "".join(progress), mode
        assert progress[-1].startswith(f"[{len(progress)}/{len(progress)}]"), mode
    out = subprocess.run(["bash", str(SETUP), "bogus", "--dry-run"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "main or test" in out.stderr


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _dry_run(mode: str, **env: str) -> list[str]:
    out = subprocess.run(["bash", str(SETUP), mode, "--dry-run"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_setup_installs_a_pinned_cpu_torch_from_pytorchs_cpu_index() -> None:
    """PyPI's torch for Linux is the CUDA build (several GB of CUDA wheels): the set-up pins
    torch and takes it from PyTorch's CPU-only index, or from pip's own indexes (a mirror)
    where that index's host does not resolve, and says so."""
    text = SETUP.read_text()
    assert f"TORCH_INDEX=${{TORCH_INDEX-{CPU_INDEX}}}" in text
    assert "TORCH=${TORCH_VERSION:-2.13.0}" in text
    lines = _dry_run("main", TORCH_INDEX="http://localhost/whl/cpu")  # a host that resolves
    assert any(line.strip().endswith("torch==2.13.0 --index-url http://localhost/whl/cpu")
               for line in lines), lines
    lines = _dry_run("test", TORCH_INDEX="https://nowhere.invalid/whl/cpu")
    step = next(i for i, line in enumerate(lines) if line.startswith("[2/"))
    assert "nowhere.invalid/whl/cpu does not resolve here" in lines[step], lines
    assert lines[step + 1].strip().endswith("torch==2.13.0"), lines


def _sh_blocks(text: str) -> list[list[str]]:
    """The commands of each ```sh block (comments and blank lines dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [[line.split("#")[0].strip() for line in b.splitlines()
             if line.split("#")[0].strip()] for b in blocks]


def test_the_readme_install_block_takes_cpu_torch_and_compiles_once() -> None:
    """Into one's own environment: a pinned CPU torch from the CPU index, then compcoll in ONE
    pip line (each ``pip install .`` compiles the extension again); no bare ``pip install
    torch`` (the CUDA build) and no ``torch`` extra (PyPI's default build) anywhere."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in _sh_blocks(readme) if any(c.startswith("pip ") for c in b))
    pips = [c for c in block if c.startswith("pip install")]
    assert pips[0] == f"pip install torch==2.13.0 --index-url {CPU_INDEX}", pips
    assert len([c for c in pips if re.search(r"pip install (-e )?'?\.", c)]) == 1, pips
    assert "compcoll doctor" in block
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts]
    for page in [ROOT / "README.md", *docs]:
        text = page.read_text()
        assert ".[torch" not in text, page
        commands = [c for b in _sh_blocks(text) for c in b]
        assert "pip install torch" not in commands, page
    assert f"pip install torch==2.13.0 --index-url {CPU_INDEX}" in \
        (ROOT / "docs" / "index.md").read_text()
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["torch"] == ["torch>=2.1,<3"]  # the package's requirement stays a range


def test_the_readme_names_the_compcoll_import_and_the_emulated_bench() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "import compcoll" in readme and "compcoll.allreduce" in readme
    assert "`compcoll bench compressed -np 4 --link 1gbit`" in readme

"""The layout's promises: the library (collectives, compressors) never imports the lab
(compcoll_bench), and compressors never imports collectives."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported(package: str) -> set[str]:
    """Top-level names every module of ``package`` imports (absolute imports)."""
    names = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package,forbidden", [("collectives", {"compcoll_bench"}),
                                               ("compressors", {"compcoll_bench",
                                                                "collectives"})])
def test_dependencies_point_one_way(package: str, forbidden: set[str]) -> None:
    assert not imported(package) & forbidden


def test_importing_the_library_loads_no_lab_module() -> None:
    code = ("import sys, collectives, compressors, collectives.ddp, collectives.policy\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'compcoll_bench'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_command_runs_from_the_installed_package() -> None:
    out = subprocess.run([sys.executable, "-m", "compcoll_bench", "--version"], capture_output=True,
                         text=True, timeout=120, cwd="/")
    assert out.returncode == 0 and out.stdout.startswith("compcoll "), out.stderr


def test_the_library_imports_without_the_extension_and_says_how_to_build_it() -> None:
    code = ("import sys; sys.modules['_compcoll'] = None  # as if the build had failed\n"
            "import numpy as np, collectives, compressors\n"
            "try:\n"
            "    compressors.get('uniform:bits=8').compress(np.ones(8, np.float32), name='x',"
            " step=0)\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    assert "_compcoll is not built" in out.stdout and "pip install -e ." in out.stdout


def test_one_module_reaches_the_extension_and_one_layer_adapts_arrays() -> None:
    """Only compressors/kernels.py imports _compcoll; only the adapter layer
    (compressors/arrays.py, compressors/dtypes.py) tells array kinds apart by their module."""
    for path in [*(ROOT / "collectives").rglob("*.py"), *(ROOT / "compressors").rglob("*.py")]:
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        if rel != "compressors/kernels.py":
            assert "_compcoll" not in imported_names(path), rel
        assert "__module__.startswith" not in text, rel


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names

"""The reference site (docs/): it builds without a warning, documents every public name and
every command, and every example program it shows runs as written.

Building needs the docs tools (sphinx, myst-parser, sphinx-argparse); without them the build
and the checks on its pages are skipped, and the examples still run. An example whose first
line is ``# mpiexec -n N`` runs under mpiexec on N ranks, the others in this interpreter; one
whose docstring shows a ``torchrun ... --nproc-per-node N`` command runs that way too. Each
run has a hard timeout.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tests.mpirun import launch, mpiexec

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))
TOOLS = {"sphinx": "sphinx", "myst_parser": "myst-parser", "sphinxarg": "sphinx-argparse"}
#: each documented package and its API page: every name in its __all__ must be there
API = {"collectives": "api/collectives.html", "compressors": "api/compressors.html",
       "collectives.ddp": "api/ddp.html", "collectives.policy": "api/policy.html",
       "collectives.backend": "api/backend.html", "collectives.fsdp": "api/fsdp.html",
       "collectives.optim": "api/optim.html"}
MPI_LINE = re.compile(r"#\s*mpiexec\s+-n\s+(\d+)")
TORCHRUN_LINE = re.compile(r"^\s*torchrun --standalone --nproc-per-node (\d+) (\S+)$", re.M)


def torchrun_ranks(example: Path) -> int | None:
    """N from the example's own ``torchrun --standalone --nproc-per-node N <it>`` line."""
    for m in TORCHRUN_LINE.finditer(example.read_text()):
        if Path(m.group(2)).name == example.name:
            return int(m.group(1))
    return None


def ranks(example: Path) -> int | None:
    """N from a first line ``# mpiexec -n N``; None for a single-process example."""
    lines = example.read_text().splitlines()
    m = MPI_LINE.fullmatch(lines[0].strip()) if lines else None
    return int(m.group(1)) if m else None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, with warnings as errors, into a temporary directory."""
    missing = [pip for module, pip in TOOLS.items() if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"building the docs needs {', '.join(missing)} "
                    f"(pip install {' '.join(TOOLS.values())})")
    out = tmp_path_factory.mktemp("docs")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(out / "doctrees"), str(DOCS), str(out / "html")]
    res = launch(cmd, "sphinx-build", timeout=300)
    assert res.returncode == 0, f"the docs build failed or warned:\n{res.stdout[-6000:]}"
    return out / "html"


def test_docs_build_without_a_warning(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "cli.html").is_file()


@pytest.mark.parametrize("package", sorted(API))
def test_every_public_name_has_an_api_entry(site: Path, package: str) -> None:
    html = (site / API[package]).read_text()
    names = [n for n in importlib.import_module(package).__all__ if not n.startswith("__")]
    missing = [n for n in names if f'id="{package}.{n}"' not in html]
    assert not missing, f"{API[package]} lacks entries for {missing}"


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    from compcoll_bench.commands import CATALOG

    html = (site / "cli.html").read_text()
    missing = [name for name in CATALOG if f"compcoll {name}" not in html]
    assert not missing, f"cli.html lacks the commands {missing}"


def test_every_registered_algorithm_and_scheme_is_described(site: Path) -> None:
    import collectives
    from collectives.sparse import ALGORITHMS

    pages = {"concepts/algorithms.html": collectives.algorithms(),
             "concepts/compression.html": collectives.schemes(),
             "concepts/sparse.html": list(ALGORITHMS)}
    for page, names in pages.items():
        html = (site / page).read_text()
        missing = [n for n in names if f">{n}<" not in html]
        assert not missing, f"{page} does not describe {missing}"


def test_every_example_is_shown_on_a_page() -> None:
    text = "\n".join(p.read_text() for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    assert EXAMPLES, "docs/examples holds no example"
    unshown = [e.name for e in EXAMPLES if f"examples/{e.name}" not in text]
    assert not unshown, f"examples no page includes: {unshown}"


@pytest.mark.parametrize("example", [
    pytest.param(e, id=e.stem, marks=[pytest.mark.mpi] if ranks(e) else []) for e in EXAMPLES])
def test_example_runs(example: Path) -> None:
    n = ranks(example)
    cmd = [sys.executable, str(example)]
    if n is not None:
        cmd = [mpiexec(), "-n", str(n), *cmd]
    res = launch(cmd, f"docs/examples/{example.name}", timeout=240,
                 env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-6000:]


@pytest.mark.mpi
@pytest.mark.parametrize("example", [
    pytest.param(e, id=e.stem) for e in EXAMPLES if torchrun_ranks(e) is not None])
def test_example_runs_under_torchrun_as_its_docstring_says(example: Path) -> None:
    """Under torchrun no MPI launcher joins the ranks: the example must set up
    torch.distributed itself, or ``comm=None`` refuses to run each rank alone."""
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node",
           str(torchrun_ranks(example)), str(example)]
    res = launch(cmd, f"torchrun docs/examples/{example.name}", timeout=240,
                 env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-6000:]

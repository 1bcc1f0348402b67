"""``compcoll bench compressors``: the compressor benchmark of ``bench/compressors.py``.

The benchmark lives beside its results in the repository's ``bench/`` directory; this command
loads it from there by path and hands it the remaining arguments, so both ways of running it
(``python bench/compressors.py ...`` and ``compcoll bench compressors ...``) are one program.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from ..cli import command

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compressors.py"


def load(path: Path = SCRIPT) -> ModuleType:
    """Import the benchmark script as a module (it is not part of the installed package)."""
    if not path.is_file():
        raise SystemExit(f"compcoll: bench compressors runs {path}, which is not here; it "
                         "ships with the source tree (git clone), not with the wheel")
    spec = importlib.util.spec_from_file_location("compcoll_bench_compressors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Every other option is the benchmark's own (--out, --sizes, --threads, "
                "--repeats, --specs); 'compcoll bench compressors -- -h' lists them.")


@command("bench compressors", help="compressor throughput, ratio and error (bench/compressors.py)",
         arguments=_arguments, passthrough=True)
def run(args: argparse.Namespace) -> int:
    module = load()
    saved, sys.argv[0] = sys.argv[0], "compcoll bench compressors"  # its usage line's name
    try:
        return int(module.main(args.rest) or 0)
    finally:
        sys.argv[0] = saved

"""``compcoll bench compressors``: the compressor benchmark of ``bench.compressor_sweep``.

This command hands the remaining arguments to the benchmark's ``main``, so both ways of
running it (``python -m bench.compressor_sweep ...`` and ``compcoll bench compressors ...``)
are one program, from a wheel as from a source tree.
"""

from __future__ import annotations

import argparse
import sys

from ..cli import command


def _arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Every other option is the benchmark's own (--out, --sizes, --threads, "
                "--repeats, --specs); 'compcoll bench compressors -- -h' lists them.")


@command("bench compressors",
         help="compressor throughput, ratio and error (bench.compressor_sweep)",
         arguments=_arguments, passthrough=True)
def run(args: argparse.Namespace) -> int:
    from .. import compressor_sweep  # here: `compcoll doctor` must load without the build

    saved, sys.argv[0] = sys.argv[0], "compcoll bench compressors"  # its usage line's name
    try:
        return int(compressor_sweep.main(args.rest) or 0)
    finally:
        sys.argv[0] = saved

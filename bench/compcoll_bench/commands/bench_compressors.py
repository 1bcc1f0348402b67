"""``compcoll bench compressors``: the compressor benchmark of ``compressor_sweep``.

Throughput, compression ratio and error of every compressor on Gaussian and real gradients,
then top-k and round trips side by side with torch. Both ways of running it (``python -m
compcoll_bench.commands.compressor_sweep ...`` and ``compcoll bench compressors ...``) take the same
options and run the same code.
"""

from __future__ import annotations

import argparse

from ..registry import command
from . import compressor_sweep


@command("bench compressors", arguments=compressor_sweep.add_arguments)
def run(args: argparse.Namespace) -> int:
    return compressor_sweep.run(args)

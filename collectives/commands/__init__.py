"""The ``compcoll`` subcommands; importing this package registers them in ``cli.COMMANDS``."""

from . import bench_allreduce, doctor

__all__ = ["bench_allreduce", "doctor"]

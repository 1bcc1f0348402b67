"""The ``compcoll`` subcommands; importing this package registers them in ``cli.COMMANDS``."""

from . import (
    bench_allreduce,
    bench_compressed,
    bench_compressors,
    bench_train,
    doctor,
    emulate,
    model,
)

__all__ = ["bench_allreduce", "bench_compressed", "bench_compressors", "bench_train", "doctor",
           "emulate", "model"]

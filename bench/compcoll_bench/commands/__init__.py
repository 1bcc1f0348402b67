"""The ``compcoll`` subcommands; importing this package registers them in ``cli.COMMANDS``."""

from . import (
    bench_allreduce,
    bench_compressed,
    bench_compressors,
    bench_regret,
    bench_train,
    bench_tta,
    doctor,
    emulate,
    model,
    tune,
)

__all__ = ["bench_allreduce", "bench_compressed", "bench_compressors", "bench_regret",
           "bench_train", "bench_tta", "doctor", "emulate", "model",
           "tune"]

"""The ``compcoll`` subcommands' registry: the catalog of commands (what each does, an
example, the module that defines it), the commands registered so far, and the error a command
raises for an argument it cannot run with.

A command's module (in ``compcoll_bench.commands``) registers its runner and options with
:func:`command` when imported; ``compcoll_bench.cli`` builds the parser from the catalog and
imports only the module of the command being run. This module imports neither, so commands and
the command line depend on it, not on each other.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CATALOG", "COMMANDS", "Command", "Entry", "Runner", "UsageError", "command"]


@dataclass(frozen=True)
class Entry:
    """One subcommand: the module defining it, one line on what it does, an example."""

    module: str
    help: str
    example: str


#: Every subcommand by its words, in the order ``compcoll -h`` lists them.
CATALOG: dict[str, Entry] = {
    "doctor": Entry(
        "doctor", "report the MPI, extension and optional libraries compcoll found",
        "compcoll doctor"),
    "bench allreduce": Entry(
        "bench_allreduce", "time and check allreduce algorithms over a size sweep",
        "compcoll bench allreduce -np 4 -b 1K -e 64M --json compcoll-results/ar.json"),
    "bench compressed": Entry(
        "bench_compressed",
        "compressed allreduce vs MPI_Allreduce: effective bandwidth, time split, bytes",
        "compcoll bench compressed -np 4 -s 64M --compressor uniform:bits=8"),
    "bench compressors": Entry(
        "bench_compressors", "compressor throughput, compression ratio and error on one core "
        "or more", "compcoll bench compressors --sizes 1048576 --threads 1"),
    "tune": Entry(
        "tune", "time every allreduce algorithm here and save auto's crossover table",
        "compcoll tune -np 4"),
    "model": Entry(
        "model", "forecast allreduce and compressor times on a cluster from the cost model",
        "compcoll model --nodes 16,256 --params 25.6M --compressor topk:ratio=0.01"),
    "bench regret": Entry(
        "bench_regret", "auto's regret over repeated bench allreduce runs (its pick's time "
        "over the best's)", "compcoll bench regret run1.json run2.json run3.json"),
    "bench train": Entry(
        "bench_train", "train small models with PyTorch's DDP hooks and compcoll's",
        "compcoll bench train -np 2 --model cnn --steps 100"),
    "bench tta": Entry(
        "bench_tta", "time to accuracy: train until DDP's quality with PyTorch's DDP hooks "
        "and compcoll's", "compcoll bench tta -np 2 --model cnn"),
    "bench fsdp": Entry(
        "bench_fsdp", "FSDP2 training with its own reduce-scatter (float32, bf16) and "
        "compcoll's (flat and two-level)",
        "compcoll bench fsdp -np 4 --model mlp-wide --steps 30"),
    "emulate cleanup": Entry(
        "emulate", "remove namespaces left by killed --link runs (cc<pid>-*)",
        "compcoll emulate cleanup --dry-run"),
}


Runner = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """A subcommand: its words, its options and the function that runs it."""

    name: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Runner


COMMANDS: dict[str, Command] = {}


class UsageError(Exception):
    """An argument (or combination) the command cannot run with; the message names the
    problem and what would work. ``main`` prints it as one line and exits with status 2."""


def command(name: str, *, arguments: Callable[[argparse.ArgumentParser], None] | None = None
            ) -> Callable[[Runner], Runner]:
    """Register the decorated function as the subcommand ``name`` (words separated by spaces,
    an entry of :data:`CATALOG`)."""
    def register(run: Runner) -> Runner:
        if name not in CATALOG:
            raise ValueError(f"command {name!r} is not in compcoll_bench.registry.CATALOG")
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is already registered")
        COMMANDS[name] = Command(name, arguments or (lambda parser: None), run)
        return run
    return register

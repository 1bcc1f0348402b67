"""The path a gradient travels, traced warm: from a call's entry to its first payload message.

Run on two ranks (rank 0 traces, rank 1 answers)::

    mpiexec -n 2 python scripts/trace_path.py --out bench/results/trace/hot_path.txt

Each path is called a few times first (routes decided, buffers and plans in place), then
once under ``sys.setprofile`` on rank 0, from the moment the code enters the package until
the transport's first ``isend``. The trace counts the package's files only (collectives,
compressors, compcoll): a *stay* is a run of consecutive events in one file, *files* how many
distinct files the path enters, and *returns* the stays in a file the path had already left.
The paths: ``allreduce(x, compressor=, feedback=, name=)`` through MPI, and the DDP hook
(gloo, a bucket of one 128x128 weight, 16K floats) with ``uniform:bits=8`` and with
``topk:ratio=0.01``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import collectives
import compcoll
import compressors

#: the package's directories (where the imports resolve: a checkout or an installed copy)
ROOTS = tuple(str(Path(m.__file__).resolve().parent) + os.sep
              for m in (collectives, compressors, compcoll))
WARM = 3


class Trace:
    """The files a traced call enters, in order, until the first payload message."""

    def __init__(self) -> None:
        self.files: list[str] = []  # one entry per event inside the package
        self.functions: list[str] = []
        self.done = False

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if self.done or event not in ("call", "return"):
            return
        code = frame.f_code
        if event == "call" and code.co_name == "isend" and "transport" in code.co_filename:
            self.done = True  # the first payload message
            return
        where = frame if event == "call" else frame.f_back
        if where is None:
            return
        name = where.f_code.co_filename
        if name.startswith(ROOTS):
            self.files.append(name)
            self.functions.append(where.f_code.co_name)

    def counts(self) -> tuple[int, int, int, list[str]]:
        stays: list[tuple[str, str]] = []
        for f, fn in zip(self.files, self.functions, strict=True):
            if not stays or stays[-1][0] != f:
                stays.append((f, fn))
        seen: set[str] = set()
        back = 0
        for f, _ in stays:
            back += f in seen
            seen.add(f)
        short = [f"{_short(f)}:{fn}" for f, fn in stays]
        return len(stays), len(seen), back, short


def _short(name: str) -> str:
    for root in ROOTS:
        if name.startswith(root):
            return Path(root).name + "/" + name[len(root):]
    return name


def traced(run: Callable[[], Any], rank: int) -> Trace | None:
    """``run`` once traced on rank 0 (after ``WARM`` untraced calls)."""
    for _ in range(WARM):
        run()
    if rank != 0:
        run()
        return None
    path = Trace()
    sys.setprofile(path.profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return path


def allreduce_path(rank: int) -> Trace | None:
    fb = compressors.ErrorFeedback(compressors.get("uniform:bits=8"))
    x = np.random.default_rng(rank).standard_normal(1 << 14).astype(np.float32)
    return traced(lambda: collectives.allreduce(x, compressor="uniform:bits=8", feedback=fb,
                                                name="w"), rank)


def hook_path(rank: int, spec: str) -> Trace | None:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import collectives.ddp as cddp
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(128, 128, bias=False))
    state = cddp.CompressionState(policy=spec).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    x = torch.randn(8, 128)

    def step() -> None:
        model(x).square().sum().backward()
        model.zero_grad()
    try:
        return traced(step, rank)
    finally:
        state.close()


def _revision() -> str:
    """The commit of the checkout the package was imported from (and whether it is edited)."""
    where = Path(ROOTS[0]).parent
    try:
        rev = subprocess.run(["git", "-C", str(where), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(not a git checkout)"
    return f"{rev} ({where})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the table here too")
    args = ap.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.rank
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000 if rank == 0 else 0))
    port = comm.bcast(os.environ["MASTER_PORT"] if rank == 0 else None)
    os.environ["MASTER_PORT"] = port
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=comm.size)
    rows = [("allreduce(x, compressor=, feedback=, name=)", allreduce_path(rank))]
    for spec in ("uniform:bits=8", "topk:ratio=0.01"):
        rows.append((f"DDP hook, {spec}", hook_path(rank, spec)))
    dist.destroy_process_group()
    if rank != 0:
        return
    lines = [f"# command: mpiexec -n {comm.size} python "
             f"{shlex.join(['scripts/trace_path.py', *sys.argv[1:]])}",
             f"# code traced: {_revision()}",
             "# warm (after 3 calls), rank 0 of 2, 16K floats, from the call's entry to the "
             "first payload message; the package's files only",
             f"{'path':46} {'stays':>6} {'files':>6} {'returns':>8}"]
    detail = []
    for name, path in rows:
        assert path is not None
        stays, files, back, short = path.counts()
        lines.append(f"{name:46} {stays:6d} {files:6d} {back:8d}")
        detail += ["", f"# {name}: the stays in order", *short]
    text = "\n".join(lines + detail) + "\n"
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()

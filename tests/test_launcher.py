"""``comm=None`` refuses a world of one when the launcher started more ranks (torchrun without
``init_process_group``, an mpi4py of another MPI than mpiexec's); explicit communicators of
one rank still run."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
from mpi4py import MPI

import collectives
import compcoll
from collectives import CommunicationError
from collectives.transport.launcher import LAUNCHER_SIZES, launcher_size


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch) -> None:
    """Start each test as a plain process: no launcher variable, whatever ran pytest."""
    for name in (*LAUNCHER_SIZES, "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("name", sorted(LAUNCHER_SIZES))
def test_comm_none_refuses_a_world_of_one_when_the_launcher_started_more(monkeypatch,
                                                                         name: str) -> None:
    monkeypatch.setenv(name, "2")
    with pytest.raises(CommunicationError) as caught:
        collectives.as_communicator()
    text = str(caught.value)
    assert "torch.distributed.init_process_group" in text and "mpiexec" in text, text
    assert f"{name}=2" in text and "COMM_SELF" in text, text
    with pytest.raises(CommunicationError, match="init_process_group"):
        compcoll.allreduce(torch.ones(4))


def test_explicit_communicators_of_one_rank_still_run(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    for comm in (MPI.COMM_SELF, MPI.COMM_WORLD):
        y = compcoll.allreduce(torch.ones(4), comm=comm)
        assert torch.equal(y, torch.ones(4))
    half = MPI.COMM_WORLD.Split(0)
    try:
        assert np.array_equal(collectives.allreduce(np.ones(3), comm=half), np.ones(3))
    finally:
        half.Free()


@pytest.mark.parametrize("env", [{}, {"WORLD_SIZE": "1"}, {"PMI_SIZE": "1"},
                                 {"SLURM_NTASKS": "4"}, {"WORLD_SIZE": ""}])
def test_a_single_process_job_is_no_error(monkeypatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert collectives.as_communicator().size == 1
    assert torch.equal(compcoll.allreduce(torch.ones(4)), torch.ones(4))


def test_a_torch_default_group_of_one_is_refused_under_a_larger_launch(monkeypatch) -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=timedelta(seconds=30))
    try:
        assert collectives.as_communicator().engine == "torch"
        monkeypatch.setenv("WORLD_SIZE", "2")
        with pytest.raises(CommunicationError, match="torch.distributed default group"):
            collectives.as_communicator()
        y = collectives.allreduce(np.ones(3), comm=dist.group.WORLD)
        assert np.array_equal(y, np.ones(3))
    finally:
        dist.destroy_process_group()


def test_launcher_size_reads_the_first_announcing_variable() -> None:
    assert launcher_size({"PMI_SIZE": "3", "OMPI_COMM_WORLD_SIZE": "5"}) == ("PMI_SIZE", 3)
    assert launcher_size({"WORLD_SIZE": "x", "OMPI_COMM_WORLD_SIZE": "5"}) == (
        "OMPI_COMM_WORLD_SIZE", 5)
    assert launcher_size({"SLURM_NTASKS": "8"}) is None

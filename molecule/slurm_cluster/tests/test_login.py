"""slurm_login on login1: client commands and the rendered configuration, no daemon."""

from __future__ import annotations

import testinfra

from tests.support.verify import assert_running, assert_slurm_files

NODE = "login1"
HOST = testinfra.get_host(f"podman://{NODE}")


def test_files():
    assert_slurm_files(HOST)


def test_client_commands():
    for cmd in ("sinfo", "srun", "sbatch", "scontrol", "squeue"):
        assert HOST.exists(cmd), cmd
    assert not HOST.package("slurmd").is_installed
    assert not HOST.package("slurmctld").is_installed


def test_munge_ready_for_clients():
    assert_running(HOST, "munge")

"""slurm_login on login1: the client commands, and no Slurm daemon installed (sackd in
configless mode is test_cluster.py's; `files` mode is side_effect.yml's)."""

from __future__ import annotations

import testinfra

NODE = "login1"
HOST = testinfra.get_host(f"podman://{NODE}")


def test_client_commands_and_no_daemons():
    for cmd in ("sinfo", "srun", "sbatch", "scontrol", "squeue", "sacct", "sacctmgr"):
        assert HOST.exists(cmd), cmd
    assert not HOST.package("slurmd").is_installed
    assert not HOST.package("slurmctld").is_installed

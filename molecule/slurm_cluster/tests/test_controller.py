"""slurm_controller on ctl1: slurmctld up with the rendered files and state dirs (the
controller keeps its files in configless mode too: it serves them).

The associations slurmdbd holds, and no emulator, are test_cluster.py's."""

from __future__ import annotations

import pytest
import testinfra

from tests.support.verify import assert_running, assert_slurm_files, journal

NODE = "ctl1"
HOST = testinfra.get_host(f"podman://{NODE}")


def test_files():
    assert_slurm_files(HOST)


def test_slurmctld_running():
    assert_running(HOST, "slurmctld")
    res = HOST.run("scontrol ping")
    assert res.rc == 0 and "UP" in res.stdout, res.stdout + res.stderr + journal(HOST, "slurmctld")


@pytest.mark.parametrize("path", ["/var/lib/slurm/slurmctld", "/var/log/slurm"])
def test_state_dirs(path):
    d = HOST.file(path)
    assert d.is_directory and d.user == "slurm" and d.group == "slurm"


def test_partition_from_plan():
    out = HOST.run("sinfo -h -o '%R %D'").stdout.split()
    assert out[:2] == ["gpu", "4"], out

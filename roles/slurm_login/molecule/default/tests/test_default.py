"""slurm_login on login1: client commands and the rendered configuration, no daemon."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
import testinfra

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "tests/support/molecule.py").is_file())
_spec = importlib.util.spec_from_file_location("railyard_molecule", ROOT / "tests/support/molecule.py")
support = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = support
_spec.loader.exec_module(support)
ARTIFACTS = support.artifacts_dir()
NODE = "login1"
HOST = testinfra.get_host(f"podman://{NODE}")


def journal(unit: str) -> str:
    out = HOST.run(f"journalctl -u {unit} --no-pager -n 50")
    return f"\n--- journalctl -u {unit} on {NODE} ---\n{out.stdout}{out.stderr}"


def assert_running(unit: str) -> None:
    svc = HOST.service(unit)
    if not (svc.is_running and svc.is_enabled):
        pytest.fail(f"{unit}: running={svc.is_running} enabled={svc.is_enabled}{journal(unit)}")


def assert_slurm_files(names=("slurm.conf", "topology.conf", "gres.conf", "cgroup.conf")) -> None:
    for name in names:
        want = hashlib.sha256((ARTIFACTS / "slurm" / name).read_bytes()).hexdigest()
        f = HOST.file(f"/etc/slurm/{name}")
        assert f.exists and f.sha256sum == want, name
        assert f.mode == 0o644 and f.user == "root"


def test_files():
    assert_slurm_files()


def test_client_commands():
    for cmd in ("sinfo", "srun", "sbatch", "scontrol", "squeue"):
        assert HOST.exists(cmd), cmd
    assert not HOST.package("slurmd").is_installed
    assert not HOST.package("slurmctld").is_installed


def test_munge_ready_for_clients():
    assert_running("munge")

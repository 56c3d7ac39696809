"""slurm_controller on ctl1: slurmctld up with the rendered files and state dirs."""

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
NODE = "ctl1"
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


def test_slurmctld_running():
    assert_running("slurmctld")
    res = HOST.run("scontrol ping")
    assert res.rc == 0 and "UP" in res.stdout, res.stdout + res.stderr + journal("slurmctld")


@pytest.mark.parametrize("path", ["/var/lib/slurm/slurmctld", "/var/log/slurm"])
def test_state_dirs(path):
    d = HOST.file(path)
    assert d.is_directory and d.user == "slurm" and d.group == "slurm"


def test_daemon_is_not_the_emulator():
    assert not HOST.package("slurm-wlm-emulator").is_installed
    assert HOST.file("/usr/sbin/slurmctld").linked_to == "/usr/sbin/slurmctld-wlm"


def test_partition_from_plan():
    out = HOST.run("sinfo -h -o '%R %D'").stdout.split()
    assert out[:2] == ["gpu", "4"], out

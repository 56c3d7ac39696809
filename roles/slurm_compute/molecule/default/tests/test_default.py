"""slurm_compute on gpu001 (no controller here): slurmd up, stand-in GPUs created and labelled."""

from __future__ import annotations

import hashlib
import importlib.util
import json
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
NODE = "gpu001"
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

HOSTVARS = json.loads((ARTIFACTS / f"ansible/host_vars/{NODE}.json").read_text())


def test_files():
    assert_slurm_files()


def test_slurmd_running():
    assert_running("slurmd")


def test_standin_devices():
    devices = HOSTVARS["railyard_gpus"]["devices"]
    out = HOST.run("stat -L -c '%n %F %t:%T' " + " ".join(devices)).stdout.splitlines()
    # mknod'ed here: NVIDIA's major 195 (0xc3), minor = N
    assert out == [f"{d} character special file c3:{i:x}" for i, d in enumerate(devices)], out


def test_standin_label():
    readme = HOST.file("/etc/slurm/STANDIN-GPUS.README").content_string
    assert "NOT GPUs" in readme and "/dev/nvidia0" in readme
    tmpfiles = HOST.file("/etc/tmpfiles.d/railyard-standin-gpus.conf").content_string
    assert "STAND-IN" in tmpfiles


def test_slurmd_sees_the_gres():
    res = HOST.run("slurmd -G")
    assert res.rc == 0, res.stderr
    assert "Name=gpu Type=standin Count=2" in res.stdout + res.stderr, res.stdout + res.stderr

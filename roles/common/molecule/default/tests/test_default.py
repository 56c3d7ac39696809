"""common on ctl1: hosts block, fixed IDs, time sync skipped in a container."""

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


def test_hosts_block():
    hosts = HOST.file("/etc/hosts").content_string
    assert "# BEGIN railyard hosts" in hosts and "# END railyard hosts" in hosts
    for line in (ARTIFACTS / "common/hosts").read_text().splitlines():
        assert line in hosts


def test_hosts_resolve_to_plan():
    plan = json.loads((ARTIFACTS / "plan.json").read_text())
    for node in plan["nodes"]:
        out = HOST.run(f"getent hosts {node['name']}").stdout.split()
        assert out and out[0] == node["address"], (node, out)


@pytest.mark.parametrize("name,uid", [("munge", 990), ("slurm", 991)])
def test_accounts(name, uid):
    user, group = HOST.user(name), HOST.group(name)
    assert user.uid == uid and group.gid == uid
    assert user.home == "/nonexistent" and user.shell == "/usr/sbin/nologin"


def test_time_sync_skipped_in_container():
    assert HOST.run("systemd-detect-virt --container").rc == 0
    assert not HOST.package("chrony").is_installed

"""common on ctl1: hosts block, fixed IDs, time sync skipped in a container."""

from __future__ import annotations

import json

import pytest
import testinfra

from tests.support.verify import ARTIFACTS

NODE = "ctl1"
HOST = testinfra.get_host(f"podman://{NODE}")


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

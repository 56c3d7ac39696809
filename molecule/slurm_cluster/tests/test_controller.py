"""slurm_controller on ctl1: slurmctld up with the rendered files and state dirs."""

from __future__ import annotations

import pytest
import testinfra

from tests.support import molecule as support
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


def test_daemon_is_not_the_emulator():
    assert not HOST.package("slurm-wlm-emulator").is_installed
    assert HOST.file("/usr/sbin/slurmctld").linked_to == "/usr/sbin/slurmctld-wlm"


def test_partition_from_plan():
    out = HOST.run("sinfo -h -o '%R %D'").stdout.split()
    assert out[:2] == ["gpu", "4"], out


def test_the_specs_accounts_qos_and_users_are_in_slurmdbd():
    """The lab spec's accounting (its YAML, not the render) is what sacctmgr shows."""
    acct = support.lab_spec()["partitions"]["slurm"]["accounting"]
    rows = HOST.run("sacctmgr -nP show association where cluster=lab format=Account,User,ParentName,Fairshare")
    assert rows.rc == 0, rows.stderr
    got = {tuple(r.split("|")) for r in rows.stdout.splitlines()}
    for a in acct["accounts"]:
        assert (a["name"], "", a.get("parent", "root"), str(a.get("fairshare", 1))) in got, got
    assert {(u["default_account"], u["name"]) for u in acct["users"]} <= {(a, u) for a, u, *_ in got}
    qos = HOST.run("sacctmgr -nP show qos format=Name").stdout.split()
    assert sorted(qos) == sorted({"normal", *(q["name"] for q in acct["qos"])}), qos
    assert "AccountingStorageType=accounting_storage/slurmdbd" in HOST.run("scontrol show config").stdout.replace(" ", "")

"""slurm_compute's own contract on every compute node: the stand-in GPUs it makes, and sshd
with pam_slurm_adopt in its account stack (the lab spec's partitions.slurm.pam_slurm_adopt:
{admin_group: hpcadmin}).

Jobs on these nodes (ssh adopted into a job, refused without one, only the job's GPUs) are
test_cluster.py's; `files` mode is side_effect.yml's."""

from __future__ import annotations

import json

import pytest
import testinfra

from tests.support.verify import ARTIFACTS, assert_running

PLAN = json.loads((ARTIFACTS / "plan.json").read_text())
COMPUTE = PLAN["inventory_groups"]["slurm_compute"]
ADMIN_GROUP = "hpcadmin"  # the lab spec's


def host(name: str):
    return testinfra.get_host(f"podman://{name}")


@pytest.mark.parametrize("name", COMPUTE)
def test_standin_devices_are_nvidias_numbers(name):
    devices = json.loads((ARTIFACTS / f"ansible/host_vars/{name}.json").read_text())["railyard_gpus"]["devices"]
    out = host(name).run("stat -L -c '%n %F %t:%T' " + " ".join(devices)).stdout.splitlines()
    # mknod'ed by the role: NVIDIA's major 195 (0xc3), minor = N
    assert out == [f"{d} character special file c3:{i:x}" for i, d in enumerate(devices)], out
    tmpfiles = host(name).file("/etc/tmpfiles.d/railyard-standin-gpus.conf").content_string
    assert "STAND-IN" in tmpfiles


@pytest.mark.parametrize("name", COMPUTE)
def test_sshd_runs_with_pam_slurm_adopt_after_the_system_account_checks(name):
    h = host(name)
    assert_running(h, "ssh")
    stack = [line.split() for line in h.file("/etc/pam.d/sshd").content_string.splitlines()
             if line.strip() and not line.startswith("#")]
    account = [words for words in stack if words[0] == "account" or words[:2] == ["@include", "common-account"]]
    assert [w[:3] for w in account[-3:]] == [
        ["@include", "common-account"], ["account", "sufficient", "pam_access.so"],
        ["account", "required", "pam_slurm_adopt.so"]], account
    assert ["@include", "common-session"] not in [w[:2] for w in stack]  # its pam_systemd would steal the session
    assert ["@include", "common-session-noninteractive"] in [w[:2] for w in stack]
    rules = [ln for ln in h.file("/etc/security/access-slurm-adopt.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert rules == ["+:root:ALL", f"+:({ADMIN_GROUP}):ALL", "-:ALL:ALL"]

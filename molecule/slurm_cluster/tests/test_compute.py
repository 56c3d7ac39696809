"""slurm_compute on gpu001 (no controller here): slurmd up, stand-in GPUs created and labelled."""

from __future__ import annotations

import json

import testinfra

from tests.support.verify import ARTIFACTS, assert_running, assert_slurm_files

NODE = "gpu001"
HOST = testinfra.get_host(f"podman://{NODE}")


HOSTVARS = json.loads((ARTIFACTS / f"ansible/host_vars/{NODE}.json").read_text())


def test_files():
    assert_slurm_files(HOST)


def test_slurmd_running():
    assert_running(HOST, "slurmd")


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


# pam_slurm_adopt (the lab spec's partitions.slurm.pam_slurm_adopt: {admin_group: hpcadmin}).
# No controller here, so no job can run: a user is refused with Slurm's message, root gets in.
# Adoption into a job's cgroup is proven where jobs run (molecule/slurm_cluster, the lab).
ADMIN_GROUP = "hpcadmin"  # the lab spec's


def test_sshd_runs_with_pam_slurm_adopt_after_the_system_account_checks():
    assert_running(HOST, "ssh")
    stack = [line.split() for line in HOST.file("/etc/pam.d/sshd").content_string.splitlines()
             if line.strip() and not line.startswith("#")]
    account = [words for words in stack if words[0] == "account" or words[:2] == ["@include", "common-account"]]
    assert [w[:3] for w in account[-3:]] == [
        ["@include", "common-account"], ["account", "sufficient", "pam_access.so"],
        ["account", "required", "pam_slurm_adopt.so"]], account
    assert ["@include", "common-session"] not in [w[:2] for w in stack]  # its pam_systemd would steal the session
    assert ["@include", "common-session-noninteractive"] in [w[:2] for w in stack]
    rules = [ln for ln in HOST.file("/etc/security/access-slurm-adopt.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert rules == ["+:root:ALL", f"+:({ADMIN_GROUP}):ALL", "-:ALL:ALL"]


def test_a_user_without_a_job_is_refused_and_root_gets_in():
    key = "/root/.ssh/id_ed25519"
    HOST.check_output(f"id -u dana >/dev/null 2>&1 || useradd -m -s /bin/bash dana; mkdir -p -m 700 /root/.ssh; "
                      f"[ -f {key} ] || ssh-keygen -q -t ed25519 -N '' -f {key}; "
                      f"for h in /root /home/dana; do mkdir -p $h/.ssh; cp {key}.pub $h/.ssh/authorized_keys; done; "
                      "chown -R dana: /home/dana/.ssh")
    ssh = f"ssh -i {key} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    user = HOST.run(f"{ssh} dana@localhost true")
    assert user.rc == 255 and "Access denied by pam_slurm_adopt: you have no active jobs on this node" in user.stderr
    root = HOST.run(f"{ssh} root@localhost id -un")
    assert root.rc == 0 and root.stdout.strip() == "root", root.stderr

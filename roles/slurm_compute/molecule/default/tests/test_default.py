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

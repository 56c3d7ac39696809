"""A client container reads, through NFSv4, a file that the server exports from the plan.

This kernel has neither nfsd nor an NFS client, so nfs1 serves with nfs-ganesha and gpu002
reads with libnfs (userspace, `nfs-cat`). The kernel mount itself is skipped with its reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import testinfra
import yaml

from tests.support.verify import ARTIFACTS

_INVENTORY = yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())
SERVER_NAME = next(iter(_INVENTORY["nfs_server"]["hosts"]))
CLIENT_NAME = next(iter(_INVENTORY["nfs_client"]["hosts"]))
# testinfra's podman backend: a `podman exec` per check instead of an Ansible run.
SERVER = testinfra.get_host(f"podman://{SERVER_NAME}")
CLIENT = testinfra.get_host(f"podman://{CLIENT_NAME}")
EXPORT = next(
    line.split()[0]
    for line in (ARTIFACTS / "storage" / "exports").read_text().splitlines()
    if line.startswith("/")
)
URL = f"nfs://{SERVER_NAME}{EXPORT}/hello?version=4"


def test_client_reads_the_exported_file():
    want = SERVER.file(f"{EXPORT}/hello").content_string
    got = CLIENT.run(f"nfs-cat '{URL}'")
    assert got.rc == 0, got.stderr + SERVER.run("journalctl -u nfs-ganesha --no-pager -n 30").stdout
    assert got.stdout == want == f"hello from {SERVER_NAME} over NFSv4\n"


def test_client_lists_the_export():
    got = CLIENT.run(f"nfs-ls 'nfs://{SERVER_NAME}{EXPORT}?version=4'")
    assert got.rc == 0, got.stderr
    assert "hello" in got.stdout.split()


def test_paths_outside_the_plan_are_not_exported():
    got = CLIENT.run(f"nfs-ls 'nfs://{SERVER_NAME}/etc?version=4'")
    assert got.rc != 0, got.stdout


def test_root_is_squashed():
    """root_squash from the plan: the client's root may not write into the export."""
    got = CLIENT.run(f"nfs-cp /etc/hostname 'nfs://{SERVER_NAME}{EXPORT}/from-client?version=4'")
    assert got.rc != 0
    assert not SERVER.file(f"{EXPORT}/from-client").exists


def test_client_mount_unit_is_installed_and_enabled():
    unit = next(
        p.name
        for p in (ARTIFACTS / "storage" / "units").glob("*.mount")
        if "Type=nfs" in p.read_text().splitlines()
    )
    f = CLIENT.file(f"/etc/systemd/system/{unit}")
    assert f.content_string == (ARTIFACTS / "storage" / "units" / unit).read_text()
    assert CLIENT.service(unit).is_enabled


@pytest.mark.may_skip("containers share the host kernel, which may have no NFS client")
def test_kernel_mount():
    if not {"nfs", "nfs4"} & set(CLIENT.file("/proc/filesystems").content_string.split()):
        pytest.skip(
            "kernel NFS mount not possible: this kernel has no NFS client "
            "(nfs not in /proc/filesystems); the unit is verified and enabled instead"
        )
    where = next(
        line.split("=", 1)[1]
        for p in (ARTIFACTS / "storage" / "units").glob("*.mount")
        for line in p.read_text().splitlines()
        if line.startswith("Where=")
    )
    assert CLIENT.mount_point(where).exists

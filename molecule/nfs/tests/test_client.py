"""NFS client: the plan's mount units installed as rendered, verified and enabled; the
kernel mount is skipped with its reason where the kernel has no NFS (as here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.support.verify import ARTIFACTS, run_role

UNITS = {
    p.name: dict(line.split("=", 1) for line in p.read_text().splitlines() if "=" in line)
    for p in sorted((ARTIFACTS / "storage" / "units").glob("*.mount"))
    if "Type=nfs" in p.read_text().splitlines()
}

# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
# Only the scenario's nfs_client hosts (molecule/nfs has a server and a client).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["nfs_client"][
        "hosts"
    ]
]


def kernel_has_nfs(host) -> bool:
    return bool({"nfs", "nfs4"} & set(host.file("/proc/filesystems").content_string.split()))


def test_nfs_common(host):
    assert host.package("nfs-common").is_installed
    assert host.file("/sbin/mount.nfs").exists


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_is_the_rendered_one_and_enabled(host, unit):
    f = host.file(f"/etc/systemd/system/{unit}")
    assert f.user == "root" and f.mode == 0o644
    assert f.content_string == (ARTIFACTS / "storage" / "units" / unit).read_text()
    assert host.service(unit).is_enabled


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_verifies(host, unit):
    got = host.run(f"systemd-analyze verify /etc/systemd/system/{unit}")
    assert got.rc == 0, got.stderr
    fields = UNITS[unit]
    tab = f"{fields['What']} {fields['Where']} {fields['Type']} {fields['Options']} 0 0"
    got = host.run(
        f"t=$(mktemp) && printf '%s\\n' '{tab}' > $t && findmnt --verify --tab-file $t; "
        "rc=$?; rm -f $t; exit $rc"
    )
    assert got.rc == 0, got.stdout + got.stderr
    assert host.file(fields["Where"]).is_directory


@pytest.mark.may_skip("containers share the host kernel, which may have no NFS client")
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_mounted(host, unit):
    if not kernel_has_nfs(host):
        pytest.skip(
            f"{unit} not mounted: this kernel has no NFS client (nfs not in "
            "/proc/filesystems); the unit is installed, verified and enabled instead"
        )
    assert host.mount_point(UNITS[unit]["Where"]).exists


def test_unknown_unit_fails_early():
    """A unit name the compiler did not render stops the play in preflight, named."""
    got = run_role("nfs_client", {"nfs_client_units": ["nope.mount"]}, "nfs_client_install", hosts="nfs_client")
    assert got["rc"] != 0
    assert any("storage/units/nope.mount does not exist" in m for m in got["msgs"]), got

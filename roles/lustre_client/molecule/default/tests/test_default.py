"""Lustre client: LNet options and the mount unit installed as rendered, verified and
enabled; the client install and the mount are skipped with their reasons (Debian has no
Lustre client, this kernel no Lustre modules), and a missing or unreachable package source
fails clearly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.support import molecule as support
from tests.support.verify import ARTIFACTS, run_role, sha256

SPEC = yaml.safe_load(support.LAB_SPEC.read_text())
LAB_SOURCE = SPEC["storage"]["lustre"].get("package")
UNITS = {
    p.name: dict(line.split("=", 1) for line in p.read_text().splitlines() if "=" in line)
    for p in sorted((ARTIFACTS / "storage" / "units").glob("*.mount"))
    if "Type=lustre" in p.read_text().splitlines()
}

# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["all"][
        "hosts"
    ]
]


def test_lnet_options_are_the_rendered_ones(host):
    f = host.file("/etc/modprobe.d/lustre.conf")
    assert f.user == "root" and f.mode == 0o644
    assert f.sha256sum == sha256(ARTIFACTS / "storage" / "lustre.conf")


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_is_the_rendered_one_and_enabled(host, unit):
    f = host.file(f"/etc/systemd/system/{unit}")
    assert f.user == "root" and f.mode == 0o644
    assert f.sha256sum == sha256(ARTIFACTS / "storage" / "units" / unit)
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
    # Warnings only (source unreachable, lustre unknown to this kernel); no errors.
    assert got.rc == 0, got.stdout + got.stderr
    assert "0 errors" in got.stdout + got.stderr


@pytest.mark.may_skip("Debian ships no Lustre client and the lab's source is unreachable here")
def test_client_installed(host):
    if not host.file("/sbin/mount.lustre").exists:
        pytest.skip(
            "Lustre client not installed: "
            + (
                f"the lab's package source {LAB_SOURCE} is unreachable here"
                if LAB_SOURCE
                else "the lab spec gives no storage.lustre.package"
            )
            + " and Debian has no Lustre client; LNet options and units are verified instead"
        )
    assert host.run("lctl --version").rc == 0


@pytest.mark.may_skip("containers share the host kernel, which may have no Lustre module")
@pytest.mark.parametrize("unit", sorted(UNITS))
def test_mounted(host, unit):
    if "lustre" not in host.file("/proc/filesystems").content_string.split():
        pytest.skip(
            f"{unit} not mounted: this kernel has no Lustre (lustre not in "
            "/proc/filesystems) and no client is installed"
        )
    assert host.mount_point(UNITS[unit]["Where"]).exists


UNREACHABLE = {
    "none": None,  # the lab spec's: storage.lustre.package is not set
    "url": "https://downloads.whamcloud.com/public/lustre/lustre-2.15.6/ubuntu2204/client/"
    "lustre-client-utils_2.15.6-1_amd64.deb",
}


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
def test_unreachable_source_fails_clearly(kind):
    value = UNREACHABLE[kind]
    source = None if value is None else {kind: value}
    got = run_role(
        "lustre_client",
        {"lustre_client_package": source, "lustre_client_package_required": True},
        "lustre_client_install",
    )
    assert got["rc"] != 0, "the play must fail"
    assert got["task"].endswith("Fail on an unreachable package source")
    named = "none" if value is None else f"{kind} {value}"
    assert got["msg"].startswith(f"lustre_client: cannot install from package source '{named}'")
    assert "Debian has no Lustre client package" in got["msg"]
    assert "lustre_client_package_required: false" in got["msg"]

"""The NFS server: which implementation serves, that it runs, and that it exports exactly
the plan's paths (asked of nfs-ganesha itself over D-Bus). Reading a file through NFS from
another node is molecule/nfs."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.verify import ARTIFACTS, journal, run_role, sha256

EXPORTS = sorted(
    {
        line.split()[0]
        for line in (ARTIFACTS / "storage" / "exports").read_text().splitlines()
        if line.startswith("/")
    }
)

# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
# Only the scenario's nfs_server hosts (molecule/nfs has a server and a client).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["nfs_server"][
        "hosts"
    ]
]


def kernel_nfsd(host) -> bool:
    return "nfsd" in host.file("/proc/filesystems").content_string.split()


# Which server runs depends on the host kernel the containers share: with nfsd the role
# serves with it, without (as in CI here) with nfs-ganesha. Each branch skips on the other.
GANESHA = "nfs-ganesha serves only where the host kernel has no nfsd"
KERNEL_NFSD = "kernel nfsd serves only where the host kernel has nfsd"


@pytest.fixture
def ganesha(host):
    if kernel_nfsd(host):
        pytest.skip("this kernel has nfsd: the role serves with kernel nfsd, not nfs-ganesha")
    return host


@pytest.mark.may_skip(GANESHA)
def test_ganesha_runs(ganesha):
    svc = ganesha.service("nfs-ganesha")
    assert svc.is_running and svc.is_enabled, journal(ganesha, "nfs-ganesha")
    assert (
        ganesha.socket("tcp://0.0.0.0:2049").is_listening
        or ganesha.socket("tcp://:::2049").is_listening
    ), journal(ganesha, "nfs-ganesha")


@pytest.mark.may_skip(GANESHA)
def test_ganesha_conf_is_the_rendered_one(ganesha):
    conf = ganesha.file("/etc/ganesha/ganesha.conf")
    assert conf.user == "root" and conf.mode == 0o644
    assert conf.sha256sum == sha256(ARTIFACTS / "storage" / "ganesha.conf")


@pytest.mark.may_skip(GANESHA)
def test_ganesha_exports_the_plan(ganesha):
    """nfs-ganesha starts even when an export fails ("Could not get handle ..."): ask it."""
    got = ganesha.run(
        "dbus-send --system --print-reply --dest=org.ganesha.nfsd /org/ganesha/nfsd/ExportMgr"
        " org.ganesha.nfsd.exportmgr.ShowExports"
    )
    assert got.rc == 0, got.stderr
    # Export 0 is nfs-ganesha's own NFSv4 pseudo root ("/"), not one of the plan's.
    served = sorted(
        {
            path
            for eid, path in re.findall(r'uint16 (\d+)\s+string "([^"]+)"', got.stdout)
            if eid != "0"
        }
    )
    assert served == EXPORTS, (
        got.stdout[:2000],
        ganesha.file("/var/log/ganesha/ganesha.log").content_string[-2000:],
    )


@pytest.mark.parametrize("path", EXPORTS)
def test_export_directories(host, path):
    d = host.file(path)
    assert d.is_directory and d.user == "root" and d.mode == 0o755


@pytest.mark.may_skip(KERNEL_NFSD)
def test_kernel_nfsd_exports(host):
    if not kernel_nfsd(host):
        pytest.skip(
            "kernel nfsd branch not exercised: this kernel has no nfsd (nfs-ganesha serves)"
        )
    got = host.run("exportfs -v")
    assert got.rc == 0 and all(p in got.stdout for p in EXPORTS)


@pytest.mark.may_skip(GANESHA)
def test_overlay_export_path_fails_early(host, tmp_path):
    """An export on the container's overlayfs would start nfs-ganesha without that export;
    preflight refuses it and says what to do."""
    if kernel_nfsd(host):
        pytest.skip("kernel nfsd exports any local filesystem; the check is nfs-ganesha's")
    bad = tmp_path / "artifacts"
    shutil.copytree(ARTIFACTS / "storage", bad / "storage")
    exports = bad / "storage" / "exports"
    exports.write_text(exports.read_text().replace(EXPORTS[0] + " ", "/srv/on-overlay ", 1))
    got = run_role("nfs_server", {"railyard_artifacts_dir": str(bad)}, "nfs_server_install", hosts="nfs_server")
    assert got["rc"] != 0
    assert got["msgs"] and got["msgs"][0].startswith(
        "nfs_server: /srv/on-overlay is on overlay, which has no file handles"
    ), got

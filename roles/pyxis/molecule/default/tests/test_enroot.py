"""enroot on a compute node (pyxis' scenario converges enroot, then pyxis, on gpu003, as the
deploy does; a scenario of its own converged the same again): the package the lab builds
from the vendored release archive
(scripts/build-vendor.sh), rendered config, shared directories, how an unreachable package
source fails, and the other source kinds with stand-in packages.

Every check here is required (none may skip): the lab's package source must exist."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests.support import molecule as support
from tests.support.verify import ARTIFACTS, run_role, sha256

SPEC = yaml.safe_load(support.LAB_SPEC.read_text())
LAB_SOURCE = SPEC["partitions"]["slurm"]["enroot"]["package"]
# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["all"][
        "hosts"
    ]
]
SHARED_DIRS = ["/run/enroot", "/var/lib/enroot/cache", "/var/lib/enroot/data"]


def test_enroot_conf_is_the_rendered_one(host):
    conf = host.file("/etc/enroot/enroot.conf")
    assert conf.user == "root" and conf.mode == 0o644
    assert conf.sha256sum == sha256(ARTIFACTS / "enroot" / "enroot.conf")


@pytest.mark.parametrize("path", SHARED_DIRS)
def test_shared_parent_directories(host, path):
    d = host.file(path)
    assert d.is_directory and d.user == "root"
    assert d.mode == 0o1777, f"{path} must be world-writable and sticky, like /tmp"


def test_runtime_directory_comes_back_at_boot(host):
    """/run is a tmpfs: the tmpfiles.d entry must recreate /run/enroot."""
    assert (
        host.run("rm -rf /run/enroot && systemd-tmpfiles --create /etc/tmpfiles.d/enroot.conf").rc
        == 0
    )
    d = host.file("/run/enroot")
    assert d.is_directory and d.mode == 0o1777


def test_enroot_runs(host):
    """The lab's package, installed from the spec's source with its dependencies."""
    pkg = host.package("enroot")
    assert pkg.is_installed and pkg.version == "4.1.2-1"
    assert host.file(f"/var/cache/railyard/packages/{Path(LAB_SOURCE['path']).name}").exists
    got = host.run("enroot version")
    assert got.rc == 0 and got.stdout.strip() == "4.1.2", got
    # The helpers are built against glibc with Debian's libbsd (scripts/build-vendor.sh):
    # every shared library they need must resolve on the node.
    for helper in ("enroot-mount", "enroot-switchroot", "enroot-nsenter", "enroot-aufs2ovlfs"):
        ldd = host.run(f"ldd /usr/bin/{helper}")
        assert ldd.rc == 0 and "not found" not in ldd.stdout, ldd.stdout


def test_cgroups_hook_is_diverted(host):
    """The lab (with cgroups, as its spec has now, or without): 10-cgroups.sh is moved out of
    enroot's hooks.d/*.sh (dpkg-divert, so an upgrade keeps it there)."""
    hooks = "/etc/enroot/hooks.d"
    assert not host.file(f"{hooks}/10-cgroups.sh").exists
    assert host.file(f"{hooks}/10-cgroups.sh.railyard-disabled").is_file
    assert host.file(f"{hooks}/10-shadow.sh").is_file  # the others stay
    diverted = host.check_output(f"dpkg-divert --list '{hooks}/*'")
    assert diverted == f"local diversion of {hooks}/10-cgroups.sh to {hooks}/10-cgroups.sh.railyard-disabled"


# The image scripts/build-container-image.sh builds (bootstrap's vendor step).
IMAGE = Path(os.environ.get("RAILYARD_IMAGES_DIR", "/var/cache/railyard/images")) / "busybox.sqsh"


def test_a_user_runs_the_lab_image_as_pyxis_would(host):
    """What Pyxis runs in slurmstepd, as the job's user, from a systemd service (not from
    `podman exec`, whose processes sit in the container's root cgroup): `enroot create` from
    a squashfs path, `enroot start` with a mount, and the rendered paths under the shared
    1777 parents. With 10-cgroups.sh active this fails in the lab's containers:
    enroot-mount: failed to mount: /sys/fs/cgroup/systemd//system.slice/<unit>/.. at ...
    """
    assert IMAGE.is_file(), f"{IMAGE} is missing: run scripts/build-container-image.sh"
    node = host.backend.get_hostname()
    subprocess.run(["podman", "exec", node, "mkdir", "-p", "/srv/images"], check=True)
    subprocess.run(["podman", "cp", str(IMAGE), f"{node}:/srv/images/busybox.sqsh"], check=True)
    assert host.run("id enroot-probe || useradd -m -u 4242 enroot-probe").rc == 0
    as_user = "systemd-run --quiet --pipe --wait --uid=enroot-probe --gid=enroot-probe -p Environment=SLURM_STEP_ID=0"
    try:
        created = host.run(f"{as_user} enroot create --name probe /srv/images/busybox.sqsh")
        assert created.rc == 0, created.stderr
        started = host.run(f"{as_user} enroot start --mount /home:/home probe sh -c 'hostname; id -un; ls /home'")
        assert started.rc == 0, started.stderr
        hostname, user, *homes = started.stdout.split()
        assert (hostname, user) == (host.check_output("hostname"), "enroot-probe"), started.stdout
        assert "enroot-probe" in homes, started.stdout  # the node's /home, mounted
        assert host.file("/var/lib/enroot/data/user-4242/probe/etc/os-release").contains("railyard busybox")
    finally:
        host.run(f"{as_user} enroot remove --force probe")
        host.run("userdel -r enroot-probe")


# Converge installed the lab's enroot_4.1.2-1_amd64.deb (so that file name is in the node's
# package cache, and `enroot` is an installed package that apt-cache show finds): the
# unreachable sources name NVIDIA's hardened variant, which is neither.
UNREACHABLE = {
    "url": "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/"
    "enroot-hardened_4.1.2-1_amd64.deb",
    # The lab's file name in a directory that does not exist: the lab's own path is built by
    # scripts/build-vendor.sh, so it is reachable here.
    "path": str(Path("/nonexistent/railyard") / Path(LAB_SOURCE["path"]).name),
    "apt": "enroot-hardened",
}


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
def test_unreachable_source_fails_clearly(kind):
    value = UNREACHABLE[kind]
    assert not (kind == "path" and Path(value).exists()), f"{value} must not exist"
    got = run_role(
        "enroot",
        {"enroot_package": {kind: value}, "enroot_package_required": True},
        "enroot_install",
    )
    assert got["rc"] != 0, "the play must fail"
    assert got["task"].endswith("Fail on an unreachable package source")
    assert got["msg"].startswith(f"enroot: cannot install from package source '{kind} {value}'")
    assert "enroot_package_required: false" in got["msg"]  # and says how to converge anyway


# The install itself cannot run with the real package here, so it runs with stand-ins: .debs
# built by the test (labelled as such in their descriptions); the one for the path source
# depends on jq, one of enroot's real dependencies, so apt must resolve it from the mirror.
# Verify is the last step before destroy: nothing is purged afterwards.
STANDIN = "railyard-package-standin"


def build_deb(root: Path, name: str, depends: str | None) -> Path:
    pkg = root / name
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr/share/doc" / name).mkdir(parents=True)
    (pkg / "usr/share/doc" / name / "README").write_text("stand-in payload, not enroot\n")
    (pkg / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
        + (f"Depends: {depends}\n" if depends else "")
        + "Maintainer: railyard tests <tests@railyard.invalid>\n"
        "Description: stand-in payload for the package-source install path (not enroot)\n"
    )
    deb = root / "srv" / f"{name}_1.0_all.deb"
    deb.parent.mkdir(exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("standin")
    return {
        "path": build_deb(root, f"{STANDIN}-path", "jq"),
        "url": build_deb(root, f"{STANDIN}-url", None),
    }


def test_install_from_a_path_with_a_stand_in(host, standins):
    """path source: copied from the controller, installed with its dependencies, and a second
    run changes nothing."""
    source = {"enroot_package": {"path": str(standins["path"])}, "enroot_package_required": True}
    first = run_role("enroot", source, "enroot_install", check=False)
    assert first["rc"] == 0, first
    assert host.package(f"{STANDIN}-path").is_installed and host.package("jq").is_installed
    again = run_role("enroot", source, "enroot_install", check=False)
    assert again["rc"] == 0 and again["changed"] == 0, again


def test_install_from_a_url_with_a_stand_in(host, standins):
    """url source: probed and fetched by the node from an HTTP server on the podman gateway."""
    deb = standins["url"]
    network = os.environ.get("RAILYARD_MOLECULE_NETWORK", "railyard-molecule")
    gw = subprocess.run(
        [
            "podman",
            "network",
            "inspect",
            network,
            "--format",
            "{{range .Subnets}}{{.Gateway}}{{end}}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(deb.parent))
    server = http.server.ThreadingHTTPServer((gw, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://{gw}:{server.server_port}/{deb.name}"
        got = run_role(
            "enroot",
            {"enroot_package": {"url": url}, "enroot_package_required": True},
            "enroot_install",
            check=False,
        )
    finally:
        server.shutdown()
    assert got["rc"] == 0, got
    assert host.package(f"{STANDIN}-url").is_installed
    assert host.file(f"/var/cache/railyard/packages/{deb.name}").exists


def test_install_from_apt_with_a_stand_in(host):
    """apt source: looked up in the node's repositories and installed (tree stands in)."""
    assert not host.package("tree").is_installed
    got = run_role(
        "enroot",
        {"enroot_package": {"apt": "tree"}, "enroot_package_required": True},
        "enroot_install",
        check=False,
    )
    assert got["rc"] == 0, got
    assert host.package("tree").is_installed

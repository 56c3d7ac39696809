"""Pyxis on a compute node: the package the lab builds from the vendored release archive
(scripts/build-vendor.sh), plugstack wiring, the rendered pyxis.conf active, that srun
really loads the plugin, what a missing `required` plugin does to srun (why the role keeps
pyxis.conf inactive without it), and how an unreachable package source fails.

Every check here is required (none may skip): the lab's package source must exist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.support import molecule as support
from tests.support.verify import ARTIFACTS, run_role, sha256

RENDERED = ARTIFACTS / "slurm" / "plugstack.conf.d" / "pyxis.conf"
SPEC = yaml.safe_load(support.LAB_SPEC.read_text())
LAB_SOURCE = SPEC["partitions"]["slurm"]["pyxis"]["package"]
CONF_D = "/etc/slurm/plugstack.conf.d"
# The plugin the rendered file loads, and the line that loads it (1-based, as Slurm counts).
_LINES = RENDERED.read_text().splitlines()
LOAD_LINE = next(
    i for i, line in enumerate(_LINES, 1) if line.split()[:1] in (["required"], ["optional"])
)
PLUGIN = _LINES[LOAD_LINE - 1].split()[1]
# The options Pyxis 0.24 adds to srun (pyxis args.c).
PYXIS_OPTIONS = [
    "--container-image",
    "--container-mounts",
    "--container-workdir",
    "--container-name",
    "--container-writable",
    "--container-remap-root",
]

# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["all"][
        "hosts"
    ]
]


def test_package_installed_from_the_lab_source(host):
    """The .deb the spec names, installed with its dependency enroot (the enroot role ran
    first, as in the deploy)."""
    deb = Path(LAB_SOURCE["path"]).name
    pkg = host.package("nvslurm-plugin-pyxis")
    assert pkg.is_installed and pkg.version == "0.24.0-1"
    assert host.package("enroot").is_installed
    assert host.file(f"/var/cache/railyard/packages/{deb}").exists
    plugin = host.file(PLUGIN)
    assert plugin.is_file and plugin.user == "root"
    assert PLUGIN in host.run("dpkg -L nvslurm-plugin-pyxis").stdout.splitlines()


def test_plugstack_includes_conf_d(host):
    plugstack = host.file("/etc/slurm/plugstack.conf")
    assert f"include {CONF_D}/*.conf" in plugstack.content_string.splitlines()


def test_pyxis_conf_is_the_rendered_one_and_active(host):
    active = host.file(f"{CONF_D}/pyxis.conf")
    assert active.exists and active.mode == 0o644 and active.user == "root"
    assert active.sha256sum == sha256(RENDERED)
    assert not host.file(f"{CONF_D}/pyxis.conf.inactive").exists


def test_srun_loads_pyxis(host):
    """srun reads plugstack.conf, follows the include, loads the `required` plugin (built
    against this Slurm: no "Incompatible plugin version") and offers its options."""
    got = host.run("srun --help")
    assert got.rc == 0, got.stderr
    assert "spank" not in got.stderr and "Incompatible" not in got.stderr, got.stderr
    missing = [opt for opt in PYXIS_OPTIONS if opt not in got.stdout]
    assert not missing, f"srun --help lacks {missing}:\n{got.stdout}"


def test_missing_required_plugin_aborts_srun(host):
    """Why the role installs pyxis.conf inactive where its plugin is absent: with the plugin
    moved aside, the active rendered file (`required`) makes srun abort. These are Slurm
    22.05's messages; the plugin is put back whatever happens."""
    aside = f"{PLUGIN}.railyard-aside"
    assert host.run(f"mv {PLUGIN} {aside}").rc == 0
    try:
        got = host.run("srun --help")
    finally:
        assert host.run(f"mv {aside} {PLUGIN}").rc == 0
    assert got.rc != 0, "a missing `required` SPANK plugin must make srun fail"
    lines = got.stderr.splitlines()
    assert f"srun: error: spank: {PLUGIN}: Dlopen of plugin file failed" in lines
    assert (
        f"srun: error: spank: {CONF_D}/pyxis.conf:{LOAD_LINE}: "
        f"Failed to load plugin {PLUGIN}. Aborting."
    ) in lines
    assert "srun: error: Plug-in initialization failed" in lines
    assert host.run("srun --help").rc == 0, "srun must work again with the plugin back"


def test_role_deactivates_and_reactivates_pyxis_conf(host):
    """The lab-only fallback (pyxis_package_required: false): with the plugin absent the role
    moves the rendered file to pyxis.conf.inactive and srun works without Pyxis; with the
    plugin back, a run activates it again."""
    aside = f"{PLUGIN}.railyard-aside"
    lab_only = {"pyxis_package": None, "pyxis_package_required": False}
    assert host.run(f"mv {PLUGIN} {aside}").rc == 0
    try:
        off = run_role("pyxis", lab_only, "pyxis_configure", check=False)
        inactive = host.file(f"{CONF_D}/pyxis.conf.inactive")
        # host.file is lazy: read the state now, before the finally below changes it.
        inactive_sha = inactive.sha256sum if inactive.exists else None
        active_gone = not host.file(f"{CONF_D}/pyxis.conf").exists
        plain = host.run("srun --help")
    finally:
        assert host.run(f"mv {aside} {PLUGIN}").rc == 0
        on = run_role("pyxis", lab_only, "pyxis_configure", check=False)
    assert off["rc"] == 0, off
    assert inactive_sha == sha256(RENDERED) and active_gone
    assert plain.rc == 0 and "spank" not in plain.stderr, plain.stderr
    assert on["rc"] == 0, on
    assert host.file(f"{CONF_D}/pyxis.conf").sha256sum == sha256(RENDERED)
    assert not host.file(f"{CONF_D}/pyxis.conf.inactive").exists
    assert "--container-image" in host.run("srun --help").stdout


UNREACHABLE = {
    # The lab's file name in a directory that does not exist: the lab's own path is built by
    # scripts/build-vendor.sh, so it is reachable here.
    "path": str(Path("/nonexistent/railyard") / Path(LAB_SOURCE["path"]).name),
    # Not NVIDIA's name (nvslurm-plugin-pyxis): converge installed that, and apt-cache show
    # finds installed packages, so the node "has" it. A name no repository has.
    "apt": "nvslurm-plugin-pyxis-railyard-absent",
}


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
def test_unreachable_source_fails_clearly(kind):
    value = UNREACHABLE[kind]
    assert not (kind == "path" and Path(value).exists()), f"{value} must not exist"
    got = run_role(
        "pyxis", {"pyxis_package": {kind: value}, "pyxis_package_required": True}, "pyxis_install"
    )
    assert got["rc"] != 0, "the play must fail"
    assert got["task"].endswith("Fail on an unreachable package source")
    assert got["msg"].startswith(f"pyxis: cannot install from package source '{kind} {value}'")
    assert "pyxis_package_required: false" in got["msg"]

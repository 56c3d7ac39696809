"""Pyxis on a login node: plugstack wiring, the rendered pyxis.conf, that srun really loads
it, and how an unreachable package source fails. The lab has no Pyxis package (NVIDIA ships
none; it is built per Slurm release), so the plugin itself is not tested here."""

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

# testinfra's podman backend: a `podman exec` per check instead of an Ansible run (~1.5 s).
testinfra_hosts = [
    f"podman://{name}"
    for name in yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())["all"][
        "hosts"
    ]
]


def test_plugstack_includes_conf_d(host):
    plugstack = host.file("/etc/slurm/plugstack.conf")
    assert f"include {CONF_D}/*.conf" in plugstack.content_string.splitlines()


def test_pyxis_conf_is_the_rendered_one(host):
    """Active where the plugin is, inactive (outside the include glob) where it is not."""
    active = host.file(f"{CONF_D}/pyxis.conf")
    inactive = host.file(f"{CONF_D}/pyxis.conf.inactive")
    installed = active if host.file(PLUGIN).exists else inactive
    other = inactive if installed is active else active
    assert installed.exists and installed.mode == 0o644 and installed.user == "root"
    assert installed.sha256sum == sha256(RENDERED)
    assert not other.exists


def test_srun_works_without_the_plugin(host):
    """With pyxis.conf inactive, srun is not broken by the missing `required` plugin."""
    if host.file(PLUGIN).exists:
        pytest.skip(f"{PLUGIN} is installed: pyxis.conf is active")
    got = host.run("srun --help")
    assert got.rc == 0, got.stderr
    assert "spank" not in got.stderr


def test_srun_loads_the_plugstack(host):
    """Activate the rendered pyxis.conf with its plugin missing: srun must read plugstack.conf,
    follow the include into plugstack.conf.d, try to load the plugin the file names, and, as it
    is `required`, abort. These are Slurm 22.05's messages."""
    if host.file(PLUGIN).exists:
        pytest.skip(f"{PLUGIN} is installed: see test_pyxis_options")
    assert host.run(f"mv {CONF_D}/pyxis.conf.inactive {CONF_D}/pyxis.conf").rc == 0
    try:
        got = host.run("srun --help")
    finally:
        assert host.run(f"mv {CONF_D}/pyxis.conf {CONF_D}/pyxis.conf.inactive").rc == 0
    assert got.rc != 0, "a missing `required` SPANK plugin must make srun fail"
    lines = got.stderr.splitlines()
    assert f"srun: error: spank: {PLUGIN}: Dlopen of plugin file failed" in lines
    assert (
        f"srun: error: spank: {CONF_D}/pyxis.conf:{LOAD_LINE}: "
        f"Failed to load plugin {PLUGIN}. Aborting."
    ) in lines
    assert "srun: error: Plug-in initialization failed" in lines


def test_pyxis_options(host):
    if not host.file(PLUGIN).exists:
        pytest.skip(
            f"{PLUGIN} is not installed: the lab's package source {LAB_SOURCE} is unreachable "
            "here (NVIDIA ships no Pyxis package); plugstack wiring is verified instead"
        )
    assert "--container-image" in host.run("srun --help").stdout


UNREACHABLE = {
    "path": LAB_SOURCE.get("path")
    or "/var/cache/railyard/packages/nvslurm-plugin-pyxis_0.24.0-1_amd64.deb",
    "apt": "nvslurm-plugin-pyxis",
}


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
def test_unreachable_source_fails_clearly(kind):
    value = UNREACHABLE[kind]
    if kind == "path" and Path(value).exists():
        pytest.skip(f"{value} exists on this controller: that source is reachable")
    got = run_role(
        "pyxis", {"pyxis_package": {kind: value}, "pyxis_package_required": True}, "pyxis_install"
    )
    assert got["rc"] != 0, "the play must fail"
    assert got["task"].endswith("Fail on an unreachable package source")
    assert got["msg"].startswith(f"pyxis: cannot install from package source '{kind} {value}'")
    assert "pyxis_package_required: false" in got["msg"]

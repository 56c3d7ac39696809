"""The Slurm roles compare the installed release with the spec's cluster.versions.slurm.

The comparison's inputs: `railyard render` writes railyard_slurm_version for every host,
each role's default picks it up, and each role reads major.minor from dpkg's version
string. (The assert itself ran against real trixie packages: see the roles' molecule
scenarios, and the commit that added it for the failure message.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from railyard.load import load_plan
from railyard.render import render

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("slurm_controller", "slurm_compute", "slurm_login")


def _release(role: str, dpkg_version: str) -> str:
    expr = yaml.safe_load((ROOT / f"roles/{role}/vars/main.yml").read_text())[f"_{role}_installed_release"]
    templar = Templar(loader=DataLoader(), variables={f"__{role}_version": {"stdout": dpkg_version}})
    return templar.template(trust_as_template(expr))


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("dpkg_version", "release"),
    [
        ("24.11.5-4+deb13u1", "24.11"),  # Debian 13
        ("22.05.8-4+deb12u3", "22.05"),  # Debian 12
        ("1:25.05.2-1", "25.05"),  # an epoch
        ("", ""),  # not installed (check mode before the first install)
        ("garbage", ""),
    ],
)
def test_installed_release_is_major_minor(role, dpkg_version, release):
    assert _release(role, dpkg_version) == release


@pytest.mark.parametrize("role", ROLES)
def test_the_default_is_the_spec_version(role):
    defaults = yaml.safe_load((ROOT / f"roles/{role}/defaults/main.yml").read_text())
    assert defaults[f"{role}_slurm_version"] == "{{ railyard_slurm_version | default('') }}"


def test_render_gives_every_host_the_spec_version():
    import yaml

    spec = ROOT / "inventories/lab/cluster.yaml"
    want = yaml.safe_load(spec.read_text())["cluster"]["versions"]["slurm"]  # the spec's, as written
    art = render(load_plan(spec))
    assert json.loads(art["ansible/group_vars/all.json"])["railyard_slurm_version"] == want
    assert json.loads(art["ansible/inventory.json"])["all"]["vars"]["railyard_slurm_version"] == want

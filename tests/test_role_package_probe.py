"""The roles' ``*_packages_missing`` expressions, templated by Ansible itself.

Each role asks dpkg-query which packages are installed and calls apt only for the
missing ones (apt loads the whole package cache, about a second per host). An
expression that never matches makes apt run on every converge and every drift check
without ever reporting a change, so idempotence tests cannot see it: this test can.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# role -> (registered dpkg-query result, the packages it asks about, extra vars)
PROBES = {
    "munge": ("__munge_dpkg", "munge_packages", {}),
    "slurm_controller": ("__slurm_controller_dpkg", "slurm_controller_packages", {}),
    "slurm_compute": ("__slurm_compute_dpkg", "slurm_compute_packages", {}),
    "slurm_login": ("__slurm_login_dpkg", "slurm_login_packages", {}),
    "nfs_client": ("__nfs_client_dpkg", "nfs_client_packages", {}),
    "nfs_server": ("__nfs_server_dpkg", "nfs_server_ganesha_packages", {"__nfs_server_impl": "ganesha"}),
}


def _missing(role: str, dpkg_lines: list[str]) -> list[str]:
    registered, _packages, extra = PROBES[role]
    var = f"_{role}_packages_missing"
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml"), str(ROOT / "roles" / role / "vars" / "main.yml")],
        "vars": {registered: {"stdout_lines": dpkg_lines}, "railyard_artifacts_dir": "/nonexistent", **extra},
        "tasks": [{"ansible.builtin.debug": {"msg": f"RESULT={{{{ {var} | to_json }}}}"}}],
    }]
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "/dev/stdin"],
        input=yaml.safe_dump(play), capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (msg,) = [h["msg"] for p in json.loads(proc.stdout)["plays"] for t in p["tasks"] for h in t["hosts"].values()]
    return json.loads(msg.removeprefix("RESULT="))


@pytest.mark.parametrize("role", sorted(PROBES))
def test_apt_runs_only_for_missing_packages(role: str) -> None:
    _registered, packages_var, _extra = PROBES[role]
    packages = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[packages_var]
    # dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' prints "name ii " when installed
    assert _missing(role, [f"{p} ii " for p in packages]) == []
    assert _missing(role, [f"{p} ii " for p in packages[1:]] + [f"{packages[0]} rc "]) == packages[:1]
    assert _missing(role, []) == packages

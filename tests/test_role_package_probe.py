"""The package probe the roles share (roles/_shared/tasks/packages.yml), templated by Ansible.

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
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "roles" / "_shared" / "tasks" / "packages.yml"
# role -> (the variable its import passes as _shared_packages, the defaults it comes from, extra vars)
PROBES = {
    "munge": ("munge_packages", "munge_packages", {}),
    "slurm_controller": ("slurm_controller_packages", "slurm_controller_packages", {}),
    "slurm_compute": ("_slurm_compute_all_packages", "slurm_compute_packages", {}),
    "slurm_login": ("_slurm_login_all_packages", "slurm_login_packages", {}),
    "nfs_client": ("nfs_client_packages", "nfs_client_packages", {}),
    "nfs_server": ("_nfs_server_packages", "nfs_server_ganesha_packages", {"__nfs_server_impl": "ganesha"}),
    "k8s_control_plane": ("k8s_control_plane_packages", "k8s_control_plane_packages", {}),
    "k8s_worker": ("_k8s_worker_all_packages", "k8s_worker_packages", {"railyard_k8s_agent": "kwok"}),
}


def _play(play: dict[str, Any]) -> list[Any]:
    """Run one play on localhost; each RESULT=<json> its debug tasks printed, in order."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "/dev/stdin"],
        input=yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "connection": "local", **play}]),
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [json.loads(h["msg"].removeprefix("RESULT=")) for p in json.loads(proc.stdout)["plays"]
            for t in p["tasks"] for h in t["hosts"].values() if str(h.get("msg", "")).startswith("RESULT=")]


def test_apt_runs_only_for_missing_packages() -> None:
    """packages.yml's set_fact, as it is in the file, over dpkg-query results."""
    (fact,) = [t for t in yaml.safe_load(SHARED.read_text()) if "ansible.builtin.set_fact" in t]
    packages = ["munge", "libmunge2"]
    # dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' prints "name ii " when installed
    cases = [[f"{p} ii " for p in packages], ["munge rc ", "libmunge2 ii "],
             ["munge iU ", "libmunge2 ii "],  # half-configured
             []]  # rc 1: dpkg knows none of them
    tasks = []
    for lines in cases:
        tasks += [{**fact, "vars": {**fact["vars"], "__shared_dpkg": {"stdout_lines": lines}}},
                  {"ansible.builtin.debug": {"msg": "RESULT={{ [__demo_packages_missing, __demo_packages_installed, "
                                                    "__shared_packages_missing] | to_json }}"}}]
    results = _play({"vars": {"_shared_packages": packages, "_shared_packages_role": "demo"}, "tasks": tasks})
    assert results == [[[], packages, []], [["munge"], ["libmunge2"], ["munge"]],
                       [["munge"], ["libmunge2"], ["munge"]], [packages, [], packages]]


@pytest.mark.parametrize("role", sorted(PROBES))
def test_each_role_reads_what_the_probe_found(role: str) -> None:
    """The role passes its package list to packages.yml, and its own _<role>_packages_missing
    is the probe's fact (all of its packages when the probe has not run: its tag skipped)."""
    passed, defaults_var, extra = PROBES[role]
    text = (ROOT / "roles" / role / "tasks" / "install.yml").read_text()
    (imp,) = [t for t in yaml.safe_load(text) if "ansible.builtin.import_role" in t]
    assert imp["ansible.builtin.import_role"] == {"name": "_shared", "tasks_from": "packages"}
    assert imp["vars"]["_shared_packages_role"] == role
    assert imp["vars"]["_shared_packages"] == f"{{{{ {passed} }}}}"
    packages = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[defaults_var]
    show = {"ansible.builtin.debug": {"msg": f"RESULT={{{{ _{role}_packages_missing | to_json }}}}"}}
    assert _play({
        "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml"), str(ROOT / "roles" / role / "vars" / "main.yml")],
        "vars": {"railyard_artifacts_dir": "/nonexistent", **extra},
        "tasks": [show, {"ansible.builtin.set_fact": {f"__{role}_packages_missing": packages[:1]}}, show],
    }) == [packages, packages[:1]]

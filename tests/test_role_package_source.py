"""The package-source install the roles share (roles/_shared/tasks/package_source.yml), run
by Ansible on this machine in check mode over sources that cannot be reached: each role's
message names the source, what is wrong with it and, from the role, what to do about it.
(No case reaches apt or writes anything; the molecule scenarios install real packages.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MISSING = "/nonexistent/x_1_amd64.deb"


def _messages(role: str, artifacts: Path) -> list[str]:
    cases = [({f"{role}_package": None, f"{role}_package_required": False}),
             ({f"{role}_package": {"path": MISSING}, f"{role}_package_required": False}),
             ({f"{role}_package": {"path": MISSING}, f"{role}_package_required": True})]
    play = {"hosts": "localhost", "gather_facts": False, "connection": "local",
            "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml"), str(ROOT / "roles" / role / "vars" / "main.yml")],
            "vars": {"railyard_artifacts_dir": str(artifacts), "ansible_python_interpreter": sys.executable},
            "tasks": [{"ansible.builtin.include_tasks": {"file": str(ROOT / "roles" / role / "tasks" / "install.yml"),
                                                         "apply": {"ignore_errors": True}},
                       "vars": case} for case in cases]}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i", "localhost,", "/dev/stdin"],
        input=yaml.safe_dump([play]), capture_output=True, text=True, timeout=180, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false",
             "ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [r["msg"] for p in json.loads(proc.stdout)["plays"] for t in p["tasks"] for r in t["hosts"].values()
            if t["task"]["name"].endswith(("Say why the install is skipped", "Fail on an unreachable package source"))
            and not r.get("skipped")]


PLUGIN = "/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so"


@pytest.mark.parametrize(("role", "installed", "null_note", "fix", "without"), [
    ("enroot", "/usr/bin/enroot", "", "Enroot is published only on GitHub releases",
     "only the configuration and directories are installed; `enroot` itself is not on this node."),
    ("lustre_client", "/sbin/mount.lustre", " (the spec has no storage.lustre.package)",
     "Debian has no Lustre client package", "only the LNet configuration and the mount units are installed and verified."),
    ("pyxis", PLUGIN, "", "NVIDIA ships no prebuilt Pyxis package",
     "the rendered pyxis.conf is installed inactive (see the configure step) and srun runs without Pyxis."),
])
def test_an_unreachable_source_is_named(tmp_path, role, installed, null_note, fix, without):
    conf = tmp_path / "slurm" / "plugstack.conf.d" / "pyxis.conf"  # pyxis reads its plugin's path from it
    conf.parent.mkdir(parents=True)
    conf.write_text(f"required {PLUGIN} runtime_path=/run/pyxis\n")
    skipped_none, skipped_path, failed_path = _messages(role, tmp_path)
    assert skipped_none == (f"{role}: install SKIPPED, package source 'none': {role}_package is null{null_note} and "
                            f"{installed} is absent. {role}_package_required is false, so {without}")
    assert skipped_path == (f"{role}: install SKIPPED, package source 'path {MISSING}': no such file on the Ansible "
                            f"controller. {role}_package_required is false, so {without}")
    assert failed_path.startswith(f"{role}: cannot install from package source 'path {MISSING}': no such file on the "
                                  f"Ansible controller. {fix}")
    assert failed_path.endswith(f"To converge without it (lab only), set {role}_package_required: false.")

"""What the Slurm roles derive from config_delivery, templated by Ansible itself.

The roles' variables are evaluated against a hand-written artifacts directory (expected
values are literals here, not the compiler's output): in configless mode slurmd and sackd
get `--conf-server` with every SlurmctldHost and the first SlurmctldPort, no Slurm file is
copied to compute or login nodes, login nodes install sackd, and the controller includes
each plugstack.conf.d file by name next to plugstack.conf. In files mode none of that.
The live behaviour is molecule/slurm_cluster's (configless) and the role scenarios' (files).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

ONE = "ClusterName=t\nSlurmctldHost=ctl1\nSlurmctldParameters=enable_configless\n"
TWO = "ClusterName=t\nSlurmctldHost=head1(10.0.0.1)\nSlurmctldHost=head2 # backup\nSlurmctldPort=6820-6824\n"


def _vars(role: str, names: list[str], conf: str, tmp_path: Path, **extra) -> dict:
    art = tmp_path / "art"
    (art / "slurm/plugstack.conf.d").mkdir(parents=True, exist_ok=True)
    (art / "slurm/slurm.conf").write_text(conf)
    (art / "slurm/gres.conf").write_text("NodeName=n Name=gpu File=/dev/nvidia0\n")
    (art / "slurm/plugstack.conf.d/pyxis.conf").write_text("required /x/spank_pyxis.so\n")
    msg = "RESULT={{ {" + ", ".join(f"'{n}': {n}" for n in names) + "} | to_json }}"
    play = [{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml"), str(ROOT / "roles" / role / "vars" / "main.yml")],
        "vars": {"railyard_artifacts_dir": str(art), **extra},
        "tasks": [{"ansible.builtin.debug": {"msg": msg}}],
    }]
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "/dev/stdin"],
        input=yaml.safe_dump(play), capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOCALHOST_WARNING": "false",
             "ANSIBLE_FILTER_PLUGINS": str(ROOT / "roles" / role / "filter_plugins")},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (out,) = [h["msg"] for p in json.loads(proc.stdout)["plays"] for t in p["tasks"] for h in t["hosts"].values()]
    return json.loads(out.removeprefix("RESULT="))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("conf", "server"), [(ONE, "ctl1:6817"), (TWO, "head1:6820,head2:6820")])
def test_compute_configless_fetches_and_copies_nothing(tmp_path, conf, server):
    got = _vars("slurm_compute", ["_slurm_compute_slurmd_options", "_slurm_compute_files"], conf, tmp_path,
                railyard_slurm_config_delivery="configless")
    assert got == {"_slurm_compute_slurmd_options": f"--conf-server {server}", "_slurm_compute_files": []}


@pytest.mark.timeout(120)
def test_compute_files_copies_and_has_no_conf_server(tmp_path):
    got = _vars("slurm_compute", ["_slurm_compute_slurmd_options", "_slurm_compute_files"], ONE, tmp_path,
                railyard_slurm_config_delivery="files")
    assert got == {"_slurm_compute_slurmd_options": "", "_slurm_compute_files": ["slurm.conf", "gres.conf"]}
    # without the plan's variable (a role used alone): files, as before configless existed
    assert _vars("slurm_compute", ["slurm_compute_config_delivery"], ONE, tmp_path) == {
        "slurm_compute_config_delivery": "files"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("delivery", "server", "files", "sackd"), [
    ("configless", "head1:6820,head2:6820", [], True),
    ("files", "head1:6820,head2:6820", ["slurm.conf", "gres.conf"], False),
])
def test_login(tmp_path, delivery, server, files, sackd):
    got = _vars("slurm_login", ["_slurm_login_conf_server", "_slurm_login_files", "_slurm_login_all_packages"], TWO,
                tmp_path, railyard_slurm_config_delivery=delivery, railyard_slurm_mpi_default="none")
    assert got["_slurm_login_conf_server"] == server
    assert got["_slurm_login_files"] == files
    assert got["_slurm_login_all_packages"] == ["slurm-client", *(["sackd"] if sackd else [])]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("delivery", "includes"), [("configless", ["pyxis.conf"]), ("files", [])])
def test_controller_serves_plugstack_includes_by_name(tmp_path, delivery, includes):
    got = _vars("slurm_controller", ["_slurm_controller_plugstack_includes", "_slurm_controller_files",
                                     "_slurm_controller_src_of"], ONE, tmp_path,
                railyard_slurm_config_delivery=delivery)
    assert got["_slurm_controller_plugstack_includes"] == includes
    assert got["_slurm_controller_files"] == ["slurm.conf", "gres.conf", *includes]
    assert got["_slurm_controller_src_of"] == {n: str(tmp_path / "art/slurm/plugstack.conf.d" / n) for n in includes}

"""The railyard command, as a user runs it: exit codes, messages, files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, LAB, ROOT

BIN = Path(sys.executable).parent


def railyard(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "railyard"), *args], capture_output=True, text=True, cwd=ROOT, check=check,
                          env={**os.environ, "COLUMNS": "200"})


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_validate_examples(spec):
    res = railyard("validate", str(spec))
    assert res.returncode == 0, res.stderr
    assert "✓" in res.stdout
    data = json.loads(railyard("validate", str(spec), "--json", check=True).stdout)
    assert data["valid"] is True and data["nodes"] > 0


def test_validate_bad_spec_exits_1_with_every_message(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(LAB.read_text().replace("leaf_radix: 8", "leaf_radix: 4").replace("rails: 2", "rails: 2\n    bogus: 1"))
    res = railyard("validate", str(bad))
    assert res.returncode == 1
    assert "fabric.rail_optimized.bogus" in res.stderr and "unknown key 'bogus'" in res.stderr
    data = json.loads(railyard("validate", str(bad), "--json").stdout)
    assert data["valid"] is False
    assert any(p["path"] == "fabric.rail_optimized.bogus" and p["line"] for p in data["problems"])


def test_usage_errors_exit_1_not_the_drift_code():
    res = railyard("render", str(LAB))  # -o missing
    assert res.returncode == 1 and "required: -o/--output" in res.stderr


def test_invalid_spec_renders_nothing(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(LAB.read_text().replace("leaf_radix: 8", "leaf_radix: 4"))
    res = railyard("render", str(bad), "-o", str(tmp_path / "out"))
    assert res.returncode == 1
    assert "leaf su1-rail0" in res.stderr and "nothing was rendered" in res.stderr
    assert not (tmp_path / "out").exists()


def test_render_is_byte_identical_twice(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    railyard("render", str(LAB), "-o", str(a), check=True)
    railyard("render", str(LAB), "-o", str(b), check=True)
    assert tree_digest(a) == tree_digest(b)
    railyard("render", str(LAB), "-o", str(a), check=True)  # re-render in place changes nothing
    assert tree_digest(a) == tree_digest(b)
    assert [ln for ln in (a / "slurm" / "topology.conf").read_text().splitlines() if ln.startswith("SwitchName=")][2].startswith("SwitchName=spine")


def test_render_removes_stale_files_but_never_touches_foreign_dirs(tmp_path):
    out = tmp_path / "out"
    railyard("render", str(LAB), "-o", str(out), check=True)
    (out / "slurm" / "stale.conf").write_text("x")
    railyard("render", str(LAB), "-o", str(out), check=True)
    assert not (out / "slurm" / "stale.conf").exists()
    foreign = tmp_path / "etc"
    foreign.mkdir()
    (foreign / "keep").write_text("mine")
    res = railyard("render", str(LAB), "-o", str(foreign))
    assert res.returncode == 1 and "not written by railyard" in res.stdout + res.stderr
    assert (foreign / "keep").read_text() == "mine"


def test_topology_tree_and_json():
    res = railyard("topology", str(LAB), check=True)
    assert "su1" in res.stdout and "gpu[001-002]" in res.stdout and "kw1" in res.stdout
    data = json.loads(railyard("topology", str(LAB), "--json", check=True).stdout)
    (spine,) = data["tree"]
    assert [c["name"] for c in spine["children"]] == ["su1", "su2"]


def test_topology_dot_and_svg(tmp_path):
    dot = railyard("topology", str(LAB), "--format", "dot", check=True).stdout
    assert "spine__spine -> su__su1" in dot
    if shutil.which("dot") is None:
        pytest.skip("graphviz `dot` is not installed (scripts/bootstrap.sh installs it); SVG not checked")
    svg = tmp_path / "lab.svg"
    railyard("topology", str(LAB), "--format", "svg", "-o", str(svg), check=True)
    assert svg.read_text().lstrip().startswith("<?xml") and "su1" in svg.read_text()


def test_inventory_json_is_the_script_format():
    data = json.loads(railyard("inventory", str(LAB), "--json", check=True).stdout)
    assert data["slurm_compute"]["hosts"] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert data["slurm"]["children"] == ["slurm_controller", "slurm_login", "slurm_compute", "slurmdbd"]
    hv = data["_meta"]["hostvars"]["gpu003"]
    assert hv["ansible_host"] == "railyard-lab-gpu003" and hv["railyard_fabric"] == {"spine": "spine", "su": "su2"}
    assert hv["railyard_gpus"]["devices"] == ["/dev/nvidia0", "/dev/nvidia1"]


def test_the_spec_is_an_ansible_inventory():
    """`ansible-inventory -i <spec> --graph` through the railyard inventory plugin."""
    res = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(LAB), "--graph"], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    graph = res.stdout
    for line in ("@slurm_controller:", "|--ctl1", "@fabric_su2:", "@k8s_worker:", "@nfs_server:"):
        assert line in graph, graph
    host = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(LAB), "--host", "gpu001"], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    assert json.loads(host.stdout)["railyard_address"] == "10.77.0.12"


@pytest.mark.parametrize(("name", "delivery"), [("lab", "configless"), ("dgx-h100", "configless")])
def test_rendered_inventory_gives_each_host_the_plans_variables(tmp_path, name, delivery):
    """What Ansible merges for each host from the rendered inventory (host entries, all.json,
    group_vars of shared variables) is the plan's host variables, nothing more or less."""
    from railyard.load import load_plan
    from railyard.render import render, write

    plan = load_plan(ROOT / "inventories" / name / "cluster.yaml")
    write(render(plan), tmp_path / "out")
    res = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(tmp_path / "out/ansible/inventory.json"), "--list"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    merged = json.loads(res.stdout)["_meta"]["hostvars"]
    cluster = {"railyard_cluster": plan.name, "railyard_domain": plan.spec.cluster.domain,
               "railyard_slurm_version": plan.spec.cluster.versions.slurm,
               "railyard_kubernetes_version": plan.spec.cluster.versions.kubernetes,
               "railyard_kueue_version": plan.spec.cluster.versions.kueue,
               "railyard_volcano_version": plan.spec.cluster.versions.volcano,
               "railyard_slurm_mpi_default": plan.spec.partitions.slurm.mpi_default,
               "railyard_slurm_config_delivery": delivery,  # both target 24.11: the default
               # both keep ssh to compute nodes for users with a job there, and hpcadmin
               "railyard_slurm_pam_slurm_adopt": True, "railyard_slurm_admin_group": "hpcadmin",
               "railyard_hosts": [{"name": n.name, "address": n.address} for n in plan.nodes]}
    net = plan.spec.partitions.kubernetes.network
    # both specs keep the default pod network: the DNS is 10.96.0.0/16's tenth address
    cluster |= {"railyard_k8s_pod_cidr": str(net.pod_cidr), "railyard_k8s_service_cidr": str(net.service_cidr),
                "railyard_k8s_cluster_dns": "10.96.0.10", "railyard_k8s_dns_domain": net.dns_domain,
                "railyard_kueue_fair_sharing": False}  # neither spec turns it on
    assert sorted(merged) == sorted(plan.inventory.hostvars)
    for host, hv in plan.inventory.hostvars.items():
        assert merged[host] == {**hv, **cluster}, host


def test_ansible_inventory_reports_spec_errors(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(LAB.read_text().replace("leaf_radix: 8", "leaf_radix: 4"))
    res = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(bad), "--list"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}, check=False)
    assert res.returncode != 0
    assert "leaf su1-rail0" in res.stderr

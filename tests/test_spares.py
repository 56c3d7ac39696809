"""Spare nodes (issue 19, item 7): ``spare: true`` on a node group. Spares are cabled and in
the inventory (group ``spare``) and the topology picture, but in no scheduler: not in
slurm.conf, topology.conf or Slurm's blocks, not a Kubernetes worker, no Kueue label, no
HyperNode. Drift says they are spares and reports one that a scheduler has anyway."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from railyard import picture
from railyard.drift import compare
from railyard.drift.observed import Observed, SlurmNode
from railyard.errors import SpecError
from railyard.load import loads_plan
from railyard.render import render
from tests.conftest import ROOT
from tests.drift.recorded import k8s_obs, slurm_obs


def _with_spare(lab: dict) -> dict:
    """gpu005, a spare cabled into su2 like the other GPU nodes."""
    gpu = next(g for g in lab["nodes"] if g["group"] == "gpu")
    lab["nodes"].append({"group": "gpu-spare", "names": "gpu005", "hardware": gpu["hardware"], "spare": True})
    lab["fabric"]["rail_optimized"]["scalable_units"][1]["nodes"] = "gpu[003-005],kw2"
    return lab


@pytest.fixture
def spare_plan(lab):
    return loads_plan(yaml.safe_dump(_with_spare(lab)), "t.yaml")


def test_a_spare_is_in_the_inventory_and_no_scheduler(spare_plan):
    plan = spare_plan
    assert plan.inventory.groups["spare"] == ("gpu005",)
    assert "gpu005" in plan.inventory.groups["fabric_su2"]
    assert plan.node("gpu005").partition is None
    assert "gpu005" not in plan.slurm.compute and "gpu005" not in plan.kubernetes.workers
    art = render(plan)
    for path in ("slurm/slurm.conf", "slurm/topology.conf", "slurm/gres.conf", "kubernetes/node-labels.yaml",
                 "kubernetes/kueue.yaml", "kubernetes/volcano.yaml"):
        assert "gpu005" not in art[path], path
    assert "SwitchName=su2 Nodes=gpu[003-004] " in art["slurm/topology.conf"]
    assert "gpu005" in art["common/hosts"]
    hosts = json.loads(art["ansible/inventory.json"])["all"]
    assert hosts["children"]["spare"] == {"hosts": {"gpu005": None}}


def test_a_spare_is_in_the_picture(spare_plan):
    su2 = next(e for e in picture.as_dict(spare_plan)["tree"][0]["children"] if e["name"] == "su2")
    assert {"name": "gpu005", "partition": "spare", "nvlink": None} in su2["nodes"]
    assert "gpu005\\nspare" in picture.as_dot(spare_plan)


@pytest.mark.parametrize(
    ("where", "path"),
    [
        (lambda s: s["partitions"]["slurm"]["partitions"][0].update(nodes="gpu[001-005]"),
         "partitions.slurm.partitions[0].nodes"),
        (lambda s: s["partitions"]["kubernetes"].update(workers="kw[1-2],gpu005"), "partitions.kubernetes.workers"),
        (lambda s: s["partitions"]["slurm"].update(login="login1,gpu005"), "partitions.slurm.login"),
    ],
)
def test_a_spare_given_a_role_is_refused_there(lab, where, path):
    spec = _with_spare(lab)
    where(spec)
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(spec, sort_keys=False), "bad.yaml")
    (problem,) = [p for p in info.value.problems if p.path == path]
    assert problem.message == (
        "gpu005 is a spare (nodes[6] 'gpu-spare' has spare: true), and a spare is in no scheduler and serves no "
        "role: take it out of here, or move the node to a group without spare: true to put it in service")
    assert problem.line


def test_spares_in_nvlink_domains_leave_full_blocks_of_the_rest():
    """Two spare trays in each of the 12 Slurm racks of 18: blocks of 16, BlockSizes 16,32,64,
    and 24.11 takes it (no block is smaller than the base)."""
    spec = yaml.safe_load((ROOT / "inventories/gb200-nvl72/cluster.yaml").read_text())
    spec["cluster"]["versions"]["slurm"] = "24.11"
    spares = [f"gb{r * 18 + t:03}" for r in range(12) for t in (17, 18)]
    active = [f"gb{r * 18 + t:03}" for r in range(12) for t in range(1, 17)]
    tray = next(g for g in spec["nodes"] if g["group"] == "tray")
    tray.update(pattern=None, count=None, names=",".join(active + [f"gb{n:03}" for n in range(217, 289)]))
    tray = {k: v for k, v in tray.items() if v is not None}
    spec["nodes"] = [g for g in spec["nodes"] if g["group"] != "tray"] + [
        tray, {**{k: v for k, v in tray.items() if k != "first_address"}, "group": "tray-spare",
               "names": ",".join(spares), "spare": True}]
    spec["partitions"]["slurm"]["partitions"] = [{"name": "gb200", "nodes": ",".join(active), "default": True}]
    plan = loads_plan(yaml.safe_dump(spec, sort_keys=False), "t.yaml")
    conf = render(plan)["slurm/topology.conf"]
    assert "BlockSizes=16,32,64\n" in conf
    assert "BlockName=nvl1 Nodes=gb[001-016]\n" in conf
    assert not [n for n in plan.notes if "block" in n.message]


def test_drift_names_spares_and_a_spare_a_scheduler_has(spare_plan):
    clean = compare(spare_plan, Observed(slurm=slurm_obs()))
    assert clean.findings == ()
    assert clean.notes == (("spares: gpu005 (spare: true) are in no scheduler: checked as nodes and for their "
                           "files, not for Slurm or Kubernetes roles"),)
    obs = slurm_obs()
    registered = replace(obs, nodes=(*obs.nodes, SlurmNode("gpu005", "IDLE")))
    (f,) = compare(spare_plan, Observed(slurm=registered)).findings
    assert (f.layer, f.subject, f.kind) == ("slurm", "gpu005", "spare_in_scheduler")
    assert f.message == "gpu005 is a spare in the spec but registered in Slurm"

    def add_worker(nodes, _lists):
        nodes["items"].append({"metadata": {"name": "gpu005", "labels": {}}})

    (f,) = compare(spare_plan, Observed(kubernetes=k8s_obs(add_worker))).findings
    assert (f.layer, f.subject, f.kind) == ("kubernetes", "gpu005", "spare_in_scheduler")

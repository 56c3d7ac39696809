"""What runs pods on each Kubernetes worker: a real kubelet unless the spec's group says
``agent: kwok``. The plan carries it per node, the inventory per host
(``railyard_k8s_agent``, which roles/k8s_worker's ``k8s_worker_kubelet`` follows), so one
play serves a group that mixes both; the install sources are the same for every host."""

from __future__ import annotations

import json

import yaml

from railyard.apply.playbooks import ROLE_VARS
from railyard.drift.collect import expected_units
from railyard.load import load_plan, loads_plan
from railyard.render import render
from tests.conftest import LAB, ROOT

DGX = ROOT / "inventories/dgx-h100/cluster.yaml"


def _lab_split(lab: dict) -> dict:
    """The lab with its two workers in two groups: kw1 simulated, kw2 a real kubelet."""
    kw = next(g for g in lab["nodes"] if g["group"] == "kw")
    kw["names"] = "kw1"
    kw["agent"] = "kwok"
    lab["nodes"].append({**kw, "group": "kw-real", "names": "kw2", "agent": "kubelet"})
    return lab


def test_a_real_kubelet_unless_the_group_says_otherwise():
    for spec in (LAB, DGX, ROOT / "inventories/gb200-nvl72/cluster.yaml"):
        plan = load_plan(spec)
        assert set(plan.kubernetes.agents.values()) == {"kubelet"}, spec
        assert {plan.inventory.hostvars[w]["railyard_k8s_agent"] for w in plan.kubernetes.workers} == {"kubelet"}


def test_the_dgx_example_installs_three_control_plane_nodes_and_the_releases_it_pins():
    """Its install plan: kcp[1-3] as the control plane (each an etcd member and an apiserver,
    all behind every worker's haproxy), real kubelets, and the releases its
    cluster.versions pins, which the builds can install (validate passed: load_plan)."""
    plan = load_plan(DGX)
    doc = yaml.safe_load(DGX.read_text())
    assert plan.kubernetes.control_plane == ("kcp1", "kcp2", "kcp3")
    assert doc["partitions"]["kubernetes"]["control_plane"] == "kcp[1-3]"
    art = json.loads(render(plan)["ansible/group_vars/all.json"])
    pinned = doc["cluster"]["versions"]
    for what in ("kubernetes", "kueue", "volcano"):
        assert art[f"railyard_{what}_version"] == pinned[what], what
    assert (pinned["kueue"], pinned["volcano"]) == ("0.17.1", "1.14.1")  # what scripts/build-k8s.sh builds


def test_a_mixed_partition_gets_its_agent_per_host(lab):
    plan = loads_plan(yaml.safe_dump(_lab_split(lab)), "mixed.yaml")
    assert plan.kubernetes.agents == {"kw1": "kwok", "kw2": "kubelet"}
    art = render(plan)
    for host, agent in (("kw1", "kwok"), ("kw2", "kubelet")):
        assert plan.inventory.hostvars[host]["railyard_k8s_agent"] == agent
        assert json.loads(art["ansible/inventory.json"])["all"]["hosts"][host]["railyard_k8s_agent"] == agent
    # the extravars every worker gets do not pick the agent: they would override the host's
    assert "k8s_worker_kubelet" not in ROLE_VARS["k8s_worker"](plan)
    units = expected_units(plan, ["k8s_worker"])
    lb = ("haproxy.service", "active", "k8s_worker")  # both agents reach the apiservers through it
    assert units["kw1"] == (lb, ("kwok.service", "active", "k8s_worker"))
    assert units["kw2"] == (lb, ("containerd.service", "active", "k8s_worker"),
                            ("railyard-pod-network.service", "active", "k8s_worker"),
                            ("kubelet.service", "active", "k8s_worker"), ("kube-proxy.service", "active", "k8s_worker"))


def test_a_site_installs_the_release_and_the_lab_its_build():
    lab = load_plan(LAB)
    assert ROLE_VARS["k8s_worker"](lab)["k8s_worker_install_source"] == "binaries"
    assert ROLE_VARS["k8s_control_plane"](lab)["k8s_control_plane_install_source"] == "binaries"
    site = load_plan(DGX)
    worker, cp = ROLE_VARS["k8s_worker"](site), ROLE_VARS["k8s_control_plane"](site)
    assert worker["k8s_worker_install_source"] == cp["k8s_control_plane_install_source"] == "release"
    # no mirror named: the roles' default, dl.k8s.io
    assert "k8s_worker_release_mirror" not in worker and "k8s_control_plane_release_mirror" not in cp


def test_the_spec_names_a_mirror_for_both_roles():
    doc = yaml.safe_load(DGX.read_text())
    doc["partitions"]["kubernetes"]["release_url"] = "https://mirror.h100.example.com/kubernetes/release/"
    plan = loads_plan(yaml.safe_dump(doc), "mirror.yaml")
    want = "https://mirror.h100.example.com/kubernetes/release"  # the trailing '/' dropped
    assert ROLE_VARS["k8s_worker"](plan)["k8s_worker_release_mirror"] == want
    assert ROLE_VARS["k8s_control_plane"](plan)["k8s_control_plane_release_mirror"] == want

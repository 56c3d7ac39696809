"""Drift of what runs the Kubernetes side: each worker's kubelet and container runtime
versions (``.status.nodeInfo``), and etcd's members against the plan's control-plane nodes.

Observations are literals or recordings (tests/drift/fixtures/kubernetes/etcd_*.json: what
the probe printed against real etcd 3.4.23 members over TLS, record_etcd.py); expected
releases and names are the spec's or literals.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from railyard import exitcodes
from railyard.compiler import Plan
from railyard.drift import compare
from railyard.drift.kubernetes import etcd_from_probe, observation
from railyard.drift.observed import EtcdMember, EtcdObservation, Observed
from railyard.load import load_plan, loads_plan
from tests.conftest import ROOT
from tests.drift.recorded import FIX, k8s_docs, k8s_obs

UP = "`railyard up --stack lab`"
RUNTIME = "containerd://1.7.24~ds1"  # what tests/drift/fixtures/kubernetes/nodes.json's workers report


def etcd(case: str, host: str = "kcp1") -> EtcdObservation:
    return etcd_from_probe(host, (FIX / "kubernetes" / f"etcd_{case}.json").read_text())


def lab_obs(mutate=None, runtimes=None, etcd_case: str | None = "clean"):
    obs = k8s_obs(mutate)
    return dataclasses.replace(obs, etcd=etcd(etcd_case) if etcd_case else None,
                               applied_runtimes={"kw1": RUNTIME, "kw2": RUNTIME} if runtimes is None else runtimes,
                               applied_record="/work/.railyard/drift/lab.applied.json")


def set_info(name: str, **info: str):
    def mutate(nodes, _lists):
        node = next(n for n in nodes["items"] if n["metadata"]["name"] == name)
        node["status"]["nodeInfo"].update(info)
    return mutate


def test_the_recorded_cluster_is_clean(lab_plan):
    report = compare(lab_plan, Observed(kubernetes=lab_obs()))
    assert (report.findings, report.errors, report.notes) == ((), (), ())


# --------------------------------------------------------------------------- kubelet


def test_a_lab_kubelet_must_be_the_release_railyard_builds(lab_plan):
    """The lab's kubelets are railyard's own build of 1.35.4: another patch is drift too."""
    report = compare(lab_plan, Observed(kubernetes=lab_obs(set_info("kw1", kubeletVersion="v1.35.5"))))
    [f] = report.findings
    assert (f.layer, f.subject, f.kind, f.expected, f.observed) == (
        "kubernetes", "kw1", "kubelet_version", "kubeletVersion=v1.35.4", "kubeletVersion=v1.35.5")
    assert f.message == ("kw1: kubelet v1.35.5, the plan has v1.35.4 "
                         "(the release railyard builds for the lab, railyard/builds.py)")
    assert f.fix == (f"{UP} re-applies role k8s_worker where the files layer finds kw1's kubelet binary changed; "
                     "if it already is v1.35.4, `systemctl restart kubelet` on kw1")
    assert report.exit_code == exitcodes.DRIFT


@pytest.mark.parametrize("reported", ["v1.34.2", "1.36.0", "v2.35.4", "fake", "v1.35"])
def test_a_lab_kubelet_of_another_release_or_unparseable_is_drift(lab_plan, reported):
    [f] = compare(lab_plan, Observed(kubernetes=lab_obs(set_info("kw2", kubeletVersion=reported)))).findings
    assert (f.subject, f.kind, f.observed) == ("kw2", "kubelet_version", f"kubeletVersion={reported}")


def test_a_node_without_a_kubelet_version_is_an_unreadable_observation(lab_plan):
    def drop(nodes, _lists):
        del next(n for n in nodes["items"] if n["metadata"]["name"] == "kw2")["status"]["nodeInfo"]

    report = compare(lab_plan, Observed(kubernetes=lab_obs(drop)))
    assert report.findings == ()
    assert [(e.subject, e.message) for e in report.errors] == [
        ("kw2", ("kw2: the Node reports no container runtime version (.status.nodeInfo.containerRuntimeVersion): "
                "not compared")),
        ("kw2", "kw2: the Node reports no kubelet version (.status.nodeInfo.kubeletVersion): not compared"),
    ]
    assert report.exit_code == exitcodes.ERROR


@pytest.fixture
def site_plan() -> Plan:
    """dgx-h100 (cluster.versions.kubernetes "1.35", kcp[1-3]) with real kubelets, as
    roles/k8s_worker installs them from the release (no group says agent: kwok)."""
    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    assert set(plan.kubernetes.agents.values()) == {"kubelet"}
    return plan


def site_nodes(plan: Plan, kubelet: dict[str, str]) -> dict:
    k = plan.kubernetes
    return {"items": [{"metadata": {"name": n, "labels": dict(k.labels[n])},
                       "status": {"capacity": dict(k.capacity[n]), "allocatable": dict(k.capacity[n]),
                                  "nodeInfo": {"kubeletVersion": kubelet.get(n, "v1.35.4"),
                                               "containerRuntimeVersion": RUNTIME}}} for n in k.workers]}


def test_a_site_kubelet_must_be_of_the_spec_minor(site_plan):
    """Outside the lab the spec pins a minor: a patch release inside it is no drift."""
    nodes = site_nodes(site_plan, {"dgx097": "v1.35.9", "dgx098": "v1.34.7", "dgx099": "v1.36.0+k3s1"})
    report = compare(site_plan, Observed(kubernetes=observation(nodes, [])))
    found = [f for f in report.findings if f.kind == "kubelet_version"]
    assert [(f.subject, f.message) for f in found] == [
        ("dgx098", "dgx098: kubelet v1.34.7, the plan has v1.35.x (cluster.versions.kubernetes)"),
        ("dgx099", "dgx099: kubelet v1.36.0+k3s1, the plan has v1.35.x (cluster.versions.kubernetes)"),
    ]
    assert found[0].fix == ("install a v1.35.x kubelet on dgx098 (`railyard up --stack <stack>` re-applies role "
                            "k8s_worker, which installs its pinned release), or set cluster.versions.kubernetes to "
                            "the running minor and render again")


def test_kwok_nodes_are_not_compared_for_versions_and_the_note_says_why():
    spec = yaml.safe_load((ROOT / "inventories/dgx-h100/cluster.yaml").read_text())
    next(g for g in spec["nodes"] if g["group"] == "dgx")["agent"] = "kwok"  # the Kubernetes workers' group
    plan = loads_plan(yaml.safe_dump(spec, sort_keys=False), "kwok.yaml")
    assert set(plan.kubernetes.agents.values()) == {"kwok"}
    nodes = site_nodes(plan, {n: "fake" for n in plan.kubernetes.workers})
    for item in nodes["items"]:
        item["status"]["nodeInfo"]["containerRuntimeVersion"] = ""
    obs = dataclasses.replace(observation(nodes, []), applied_runtimes={}, applied_record="/r.json")
    report = compare(plan, Observed(kubernetes=obs))
    assert [f for f in report.findings if "version" in f.kind] == []
    assert report.errors == ()
    assert ("kubernetes: kubelet and container runtime versions of dgx[097-128] not compared: KWOK Nodes "
            "(simulated) report what their Node object says, not a running kubelet's") in report.notes


# --------------------------------------------------------------------------- containerd


def test_containerd_that_moved_since_the_last_up(lab_plan):
    report = compare(lab_plan, Observed(kubernetes=lab_obs(set_info("kw1", containerRuntimeVersion="containerd://2.1.4~ds1"))))
    [f] = report.findings
    assert (f.subject, f.kind, f.expected, f.observed) == (
        "kw1", "runtime_version", f"containerRuntimeVersion={RUNTIME}", "containerRuntimeVersion=containerd://2.1.4~ds1")
    assert f.message == f"kw1: container runtime containerd://2.1.4~ds1, {RUNTIME} when `railyard up` last finished"
    assert f.fix == (f"meant (a Debian update)? {UP} records it as applied; if not, install containerd 1.7.24~ds1 "
                     "on kw1 again (`apt-cache policy containerd` lists what apt has) and "
                     "`systemctl restart containerd kubelet` there")


def test_containerd_without_a_record_is_a_note_not_drift(lab_plan):
    moved = set_info("kw1", containerRuntimeVersion="containerd://2.1.4~ds1")
    no_record = dataclasses.replace(lab_obs(moved), applied_runtimes=None)
    report = compare(lab_plan, Observed(kubernetes=no_record))
    assert report.findings == () and report.exit_code == exitcodes.OK
    assert report.notes == (("kubernetes: container runtime versions not compared: no record of the last "
                            "`railyard up` on this machine (/work/.railyard/drift/lab.applied.json); "
                            "`railyard up` writes it"),)
    partial = compare(lab_plan, Observed(kubernetes=lab_obs(moved, runtimes={"kw2": RUNTIME})))
    assert partial.findings == ()
    assert partial.notes == (("kubernetes: container runtime of kw1 not compared: not in the record of the last "
                             "`railyard up` (/work/.railyard/drift/lab.applied.json); the next `railyard up` "
                             "records it"),)


# --------------------------------------------------------------------------- etcd


def test_etcd_probe_output_of_real_members_parses():
    assert etcd("clean").members == (
        EtcdMember("3989560819065292147", "kcp1", ("https://127.0.0.1:47309",), ("https://127.0.0.1:37511",),
                   False, True, ""),)
    learner = etcd("learner_unstarted").members[1]
    assert (learner.id, learner.name, learner.client_urls, learner.learner, learner.healthy) == (
        "18186736059097028220", "", (), True, None)
    down = {m.name: (m.healthy, m.health) for m in etcd("member_down").members}
    assert down == {"kcp2": (False, "its /health does not answer ([Errno 111] Connection refused)"),
                    "kcp1": (False, "its /health says health=false")}
    refused = etcd("refused")
    assert (refused.members, refused.failure, refused.unreadable) == ((), "[Errno 111] Connection refused", "")


@pytest.mark.parametrize(("stdout", "failure", "unreadable"), [
    ("", "", "the etcd probe printed no JSON: ''"),
    ("null", "", "the etcd probe printed NoneType, not an object"),
    ('{"endpoint": "e"}', "", "the etcd probe printed no member list"),
    ('{"list": {"error": "etcdserver: no leader", "code": 14}}', "the member list call failed: etcdserver: no leader", ""),
    ('{"list": {"members": "kcp1"}}', "", "members is not a list of members: 'kcp1'"),
    ('{"list": {"members": [1]}}', "", "members is not a list of members: [1]"),
])
def test_etcd_probe_output_that_is_not_a_member_list(stdout, failure, unreadable):
    got = etcd_from_probe("kcp1", stdout)
    assert (got.members, got.failure, got.unreadable) == ((), failure, unreadable)


def test_etcd_member_fields_of_another_shape_do_not_crash():
    """etcdctl -w json prints IDs as numbers; a health map that is no map is no answer."""
    got = etcd_from_probe("kcp1", json.dumps({"list": {"members": [{"ID": 7, "name": None, "clientURLs": ["u"]}]},
                                              "health": ["x"]}))
    assert got.members == (EtcdMember("7", "", (), ("u",), False, False, "its /health was not asked"),)


def test_etcd_with_a_learner_that_never_started(lab_plan):
    report = compare(lab_plan, Observed(kubernetes=lab_obs(etcd_case="learner_unstarted")))
    [f] = report.findings
    assert (f.subject, f.kind) == ("etcd/fc6444169a44167c", "etcd_member_unstarted")
    assert f.message == "etcd member fc6444169a44167c (https://127.0.0.1:2390) was added but has never started"
    assert f.fix == ("start etcd on the node at https://127.0.0.1:2390 with ETCD_INITIAL_CLUSTER_STATE=existing, "
                     "or `etcdctl member remove fc6444169a44167c` if it is not meant to join")


def test_etcd_member_of_no_control_plane_node_and_members_down(lab_plan):
    """Recorded: kcp1 and kcp2 in one cluster, kcp2 stopped. The lab plan has kcp1 only."""
    found = compare(lab_plan, Observed(kubernetes=lab_obs(etcd_case="member_down"))).findings
    assert [(f.subject, f.kind, f.message) for f in found] == [
        ("etcd/kcp2", "etcd_member_unexpected",
         "etcd member kcp2 (https://127.0.0.1:52691) is not a control-plane node of the spec"),
        ("kcp1", "etcd_member_unhealthy", "kcp1: etcd member kcp1 is not healthy (its /health says health=false)"),
        ("kcp2", "etcd_member_unhealthy",
         "kcp2: etcd member kcp2 is not healthy (its /health does not answer ([Errno 111] Connection refused))"),
    ]
    assert found[0].fix == ("`etcdctl member remove 405fc493f54ccf3c`, or add kcp2 to "
                            "partitions.kubernetes.control_plane")
    assert found[1].fix == f"`journalctl -u etcd` on kcp1; `systemctl restart etcd` there, or {UP}"


def test_etcd_members_compare_as_sets_with_three_control_plane_nodes():
    """dgx-h100 names kcp[1-3]: the recorded two-member cluster lacks kcp3, and both of
    its members are unhealthy; none is unexpected."""
    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    obs = dataclasses.replace(observation({"items": []}, []), etcd=etcd("member_down"))
    found = [f for f in compare(plan, Observed(kubernetes=obs)).findings if f.kind.startswith("etcd")]
    assert [(f.subject, f.kind) for f in found] == [
        ("kcp1", "etcd_member_unhealthy"), ("kcp2", "etcd_member_unhealthy"), ("kcp3", "etcd_member_missing")]
    assert found[2].message == "kcp3: etcd has no member named kcp3 (members: kcp1, kcp2)"
    assert found[2].expected == "member kcp3"


def test_etcd_member_renamed(lab_plan):
    """A member that answers under another name (ETCD_NAME edited, the data dir of another
    node): the plan's kcp1 is missing and the other one is not the spec's."""
    renamed = dataclasses.replace(etcd("clean"), members=(dataclasses.replace(etcd("clean").members[0], name="old"),))
    obs = dataclasses.replace(lab_obs(), etcd=renamed)
    found = compare(lab_plan, Observed(kubernetes=obs)).findings
    assert [(f.subject, f.kind) for f in found] == [("etcd/old", "etcd_member_unexpected"), ("kcp1", "etcd_member_missing")]
    assert found[1].fix.startswith(f"{UP} restores kcp1's /etc/default/etcd (ETCD_NAME=kcp1) and restarts etcd")


def test_etcd_down_is_drift_and_an_unreadable_probe_an_error(lab_plan):
    down = compare(lab_plan, Observed(kubernetes=lab_obs(etcd_case="refused")))
    [f] = down.findings
    assert (f.subject, f.kind, f.observed) == ("kcp1", "etcd_down", "[Errno 111] Connection refused")
    assert f.message == "kcp1: etcd does not answer on https://127.0.0.1:57257 ([Errno 111] Connection refused)"
    assert f.fix == f"`systemctl status etcd` and `journalctl -u etcd` on kcp1; start it, or {UP}"
    assert down.exit_code == exitcodes.DRIFT
    bad = dataclasses.replace(lab_obs(), etcd=EtcdObservation("kcp1", unreadable="the etcd probe printed no JSON: ''"))
    report = compare(lab_plan, Observed(kubernetes=bad))
    assert report.findings == ()
    assert [e.message for e in report.errors] == ["kcp1: etcd's members not checked: the etcd probe printed no JSON: ''"]


def test_etcd_refusing_the_probe_on_tls_points_at_the_certificates(lab_plan):
    """A handshake etcd refuses, or certificate files the probe cannot read, is still
    etcd_down (the plan's etcd does not answer drift), but the fix is the role's files."""
    said = "cannot read the client key /etc/kubernetes/pki/etcd/healthcheck-client.key (permission denied)"
    got = etcd_from_probe("kcp1", json.dumps({"endpoint": "https://127.0.0.1:2379", "error": said, "tls": True}))
    assert (got.failure, got.tls) == (said, True)
    [f] = compare(lab_plan, Observed(kubernetes=dataclasses.replace(lab_obs(), etcd=got))).findings
    assert (f.kind, f.message) == ("etcd_down", f"kcp1: etcd does not answer on https://127.0.0.1:2379 ({said})")
    assert f.fix == ("the etcd CA and the health check client certificate on kcp1 are the ones roles/k8s_control_plane "
                     f"writes (/etc/kubernetes/pki/etcd): {UP} writes them again; `journalctl -u etcd` on kcp1 says "
                     "what etcd refused")


def test_a_fixture_node_list_reads_both_versions():
    nodes, _ = k8s_docs()
    obs = observation(nodes, [])
    assert {n: (v.kubelet, v.runtime) for n, v in obs.versions.items()} == {
        "kcp1": ("", ""), "kw1": ("v1.35.4", RUNTIME), "kw2": ("v1.35.4", RUNTIME)}

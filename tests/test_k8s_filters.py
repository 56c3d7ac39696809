"""The Kubernetes roles' filters (roles/{k8s_control_plane,k8s_worker,kueue,volcano}/filter_plugins)."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import molecule as support

ROOT = Path(__file__).resolve().parent.parent


def _load(role: str, name: str):
    spec = importlib.util.spec_from_file_location(f"{role}_{name}", ROOT / f"roles/{role}/filter_plugins/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


cp = _load("k8s_control_plane", "k8s_control_plane")
worker = _load("k8s_worker", "k8s_worker")
kueue = _load("kueue", "kueue")
volcano = _load("volcano", "volcano")


def test_first_service_ip_is_the_ranges_first_host():
    assert cp.k8s_first_service_ip("10.96.0.0/16") == "10.96.0.1"
    assert cp.k8s_first_service_ip("172.20.0.0/24") == "172.20.0.1"
    with pytest.raises(ValueError):
        cp.k8s_first_service_ip("10.96.0.1/16")  # host bits set: a typo, not a range


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return support.render()


@pytest.mark.parametrize("name", ["kw1", "kw2"])
def test_node_carries_the_compiled_labels_and_the_plans_capacity(artifacts, name):
    hv = json.loads((artifacts / f"ansible/host_vars/{name}.json").read_text())
    labels = yaml.safe_load((artifacts / "kubernetes/node-labels.yaml").read_text())[name]
    node = worker.k8s_node(name, hv["railyard_node_labels"], hv["railyard_node_capacity"],
                           hv["railyard_address"], {"kwok.x-k8s.io/node": "fake"})
    assert hv["railyard_node_labels"] == labels
    assert node["metadata"]["labels"] == {**labels, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                          "railyard.dev/agent": "kwok"}
    assert node["status"]["capacity"] == {"cpu": "2", "memory": "1000Mi", "pods": "110", "nvidia.com/gpu": "2"}
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert {"type": "InternalIP", "address": hv["railyard_address"]} in node["status"]["addresses"]
    assert "status" not in worker.k8s_node_spec(node)
    assert worker.k8s_node_status(node) == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                            "status": node["status"]}


def test_node_without_gpus_advertises_none():
    cap = {"cpu": "224", "memory": "2000Gi", "pods": "110"}
    node = worker.k8s_node("cpu01", {}, cap, "10.0.0.5")
    assert node["status"]["capacity"] == {"cpu": "224", "memory": "2000Gi", "pods": "110"}
    assert "annotations" not in node["metadata"]


def test_a_real_kubelets_node_gets_only_the_plans_gpus():
    """The kubelet reports CPUs, memory and addresses; railyard sets nvidia.com/gpu only
    (and nothing on a node without GPUs), so the two never fight over a field."""
    cap = {"cpu": "2", "memory": "1000Mi", "pods": "110"}
    node = worker.k8s_node("kw2", {"a": "b"}, {**cap, "nvidia.com/gpu": "2"}, "10.0.0.6", {}, "kubelet")
    assert node["status"] == {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}
    assert node["metadata"]["labels"]["a"] == "b"
    assert worker.k8s_node("cpu02", {}, cap, "10.0.0.7", {}, "kubelet")["status"] == {}
    with pytest.raises(ValueError, match="agent must be kwok or kubelet"):
        worker.k8s_node("x", {}, cap, "10.0.0.8", {}, "containerd")


def test_node_status_differs_only_on_what_railyard_sets():
    cap = {"cpu": "2", "memory": "1000Mi", "pods": "110", "nvidia.com/gpu": "2"}
    node = worker.k8s_node("kw2", {}, cap, "10.0.0.6", {}, "kubelet")
    kubelet_status = {"capacity": {"cpu": "2", "memory": "24683664Ki", "nvidia.com/gpu": "2"},
                      "allocatable": {"cpu": "2", "memory": "24581264Ki", "nvidia.com/gpu": "2"}}
    assert worker.k8s_node_status_differs(json.dumps(kubelet_status), node) is False
    zeroed = {"capacity": {**kubelet_status["capacity"], "nvidia.com/gpu": "0"},
              "allocatable": kubelet_status["allocatable"]}
    assert worker.k8s_node_status_differs(zeroed, node) is True  # a kubelet restart zeroed it
    assert worker.k8s_node_status_differs("", node) is True       # not registered yet
    # node.yml's read: the two maps on two lines, as kubectl's jsonpath prints them
    two_lines = json.dumps(kubelet_status["capacity"]) + "\n" + json.dumps(kubelet_status["allocatable"])
    assert worker.k8s_node_status_differs(two_lines, node) is False
    assert worker.k8s_node_status_differs(json.dumps(zeroed["capacity"]) + "\n{}", node) is True
    assert worker.k8s_node_status_differs("\n", node) is True      # neither field set yet
    kwok = worker.k8s_node("kw1", {}, cap, "10.0.0.5")
    assert worker.k8s_node_status_differs(kwok["status"], kwok) is False


def test_kwok_rbac_binds_upstreams_role_to_the_group():
    role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: kwok-controller}\nrules: []\n"
    out = worker.k8s_worker_rbac(role, "railyard:kwok")
    assert out["kind"] == "List"
    assert [i["kind"] for i in out["items"]] == ["ClusterRole", "ClusterRoleBinding"]
    assert out["items"][1]["roleRef"]["name"] == "kwok-controller"
    assert out["items"][1]["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                            "name": "railyard:kwok"}]



def test_the_pki_seed_is_the_first_node_holding_a_ca_else_the_first_node():
    """A replaced first node gets the CA the others hold: it is never the seed while
    another node has one."""
    hosts = ["kcp1", "kcp2", "kcp3"]
    assert cp.k8s_pki_seed([], hosts) == "kcp1"
    assert cp.k8s_pki_seed(["kcp3", "kcp2"], hosts) == "kcp2"
    assert cp.k8s_pki_seed(["kcp1", "kcp3"], hosts) == "kcp1"
    assert cp.k8s_pki_seed(["elsewhere"], hosts) == "kcp1"
    with pytest.raises(ValueError, match="no control-plane nodes"):
        cp.k8s_pki_seed([], [])


def test_etcd_initial_cluster_names_every_member_with_its_tls_peer_url():
    got = cp.k8s_etcd_initial_cluster(["kcp1", "kcp2", "kcp3"], ["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    assert got == "kcp1=https://10.0.0.1:2380,kcp2=https://10.0.0.2:2380,kcp3=https://10.0.0.3:2380"
    with pytest.raises(ValueError, match="3 members but 2 addresses"):
        cp.k8s_etcd_initial_cluster(["kcp1", "kcp2", "kcp3"], ["10.0.0.1", "10.0.0.2"])


def test_addresses_come_from_the_plan_then_the_connection_then_the_name():
    hostvars = {"a": {"railyard_address": "10.0.0.1", "ansible_host": "x"}, "b": {"ansible_host": "10.0.0.2"}, "c": {}}
    assert cp.k8s_addresses(["a", "b", "c", "d"], hostvars) == ["10.0.0.1", "10.0.0.2", "c", "d"]


def test_a_certificate_is_a_root_client_certificate_of_the_cluster_ca_unless_it_says_otherwise():
    got = cp.k8s_cert_defaults({"name": "admin", "cn": "kubernetes-admin"}, "/etc/kubernetes/pki")
    assert got == {"name": "admin", "cn": "kubernetes-admin", "o": "", "eku": ["clientAuth"], "sans": [], "ca": "ca",
                   "dir": "/etc/kubernetes/pki", "owner": "root"}
    peer = cp.k8s_cert_defaults({"name": "peer", "cn": "kcp1", "ca": "etcd/ca", "owner": "etcd", "dir": "/etc/etcd/pki",
                                 "eku": ["serverAuth", "clientAuth"]}, "/etc/kubernetes/pki")
    assert (peer["ca"], peer["owner"], peer["dir"], peer["eku"]) == ("etcd/ca", "etcd", "/etc/etcd/pki",
                                                                    ["serverAuth", "clientAuth"])
    with pytest.raises(ValueError, match="needs a name and a cn"):
        cp.k8s_cert_defaults({"name": "x"}, "/p")


def test_kubelet_client_binding_names_one_user_and_the_role():
    out = cp.k8s_user_cluster_role_binding("kube-apiserver-kubelet-client", "system:kubelet-api-admin",
                                           "railyard:kube-apiserver-kubelet-client")
    assert out == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "railyard:kube-apiserver-kubelet-client"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}],
    }
    with pytest.raises(ValueError):
        cp.k8s_user_cluster_role_binding("", "system:kubelet-api-admin", "x")


@pytest.mark.parametrize(("name", "addresses", "sans"), [
    ("kw2", ["10.78.0.18"], ["DNS:kw2", "IP:10.78.0.18"]),
    # an address that is a name is a DNS SAN, never an invalid IP: one
    ("gpu001", ["gpu001.lab"], ["DNS:gpu001", "DNS:gpu001.lab"]),
    # the address equal to the name (no railyard_address): said once
    ("gpu001", ["gpu001"], ["DNS:gpu001"]),
    ("n1", ["fd00::0012", "", "10.0.0.1"], ["DNS:n1", "IP:fd00::12", "IP:10.0.0.1"]),
])
def test_serving_sans_are_the_name_and_each_address(name, addresses, sans):
    assert worker.k8s_serving_sans(name, addresses) == sans


def test_serving_sans_need_the_node_name():
    with pytest.raises(ValueError):
        worker.k8s_serving_sans("", ["10.0.0.1"])

WEBHOOKS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset}}
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-jobset}}
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
"""


def test_webhooks_call_the_manager_by_url_for_the_enabled_frameworks_only():
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    out = kueue.kueue_webhooks_by_url(WEBHOOKS, "https://127.0.0.1:9443/", pem, ["kueue.x-k8s.io", "batch"])
    # the validating configuration only had a JobSet webhook: nothing would serve it
    assert [d["metadata"]["name"] for d in out] == ["kueue-mutating-webhook-configuration"]
    (wh,) = out[0]["webhooks"]
    assert wh["name"] == "mjob.kb.io"
    assert wh["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job",
                                  "caBundle": base64.b64encode(pem.encode()).decode()}
    docs = list(yaml.safe_load_all(WEBHOOKS))
    kueue.kueue_webhooks_by_url(docs, "https://x", pem, ["batch"])
    assert docs == list(yaml.safe_load_all(WEBHOOKS)), "the upstream documents must not be modified"


def test_kueue_rbac_binds_the_renamed_manager_role_to_its_user():
    role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: manager-role}\nrules: []\n"
    ns, cr, crb, _election, _binding = kueue.kueue_rbac(role, "railyard:kueue", "kueue-system")
    assert ns == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
    assert cr["metadata"] == {"name": "kueue-manager-role"}
    assert crb["roleRef"]["name"] == "kueue-manager-role"
    assert crb["subjects"][0]["name"] == "railyard:kueue"
    assert kueue.k8s_list([ns])["items"] == [ns]


def test_kueue_rbac_moves_the_secrets_role_into_the_managers_namespace():
    """Without it the manager cannot watch Secrets in its namespace and never reconciles
    a ClusterQueue (seen in molecule/kubernetes: "secrets is forbidden")."""
    roles = ("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: manager-role}\nrules: []\n"
             "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
             "metadata: {name: manager-secrets-role, namespace: system}\nrules: [{resources: [secrets]}]\n")
    _ns, _cr, _crb, role, binding, _election, _ebinding = kueue.kueue_rbac(roles, "railyard:kueue", "kueue-system")
    assert role["metadata"] == {"name": "kueue-manager-secrets-role", "namespace": "kueue-system"}
    assert role["rules"] == [{"resources": ["secrets"]}]
    assert binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] == "kueue-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "kueue-manager-secrets-role"}
    assert binding["subjects"][0]["name"] == "railyard:kueue"


def test_kueue_rbac_lets_the_managers_elect_a_leader_in_their_namespace():
    """One manager per control-plane node: without a Role on Leases in its namespace the
    manager cannot take the Lease and never starts its controllers."""
    role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: manager-role}\nrules: []\n"
    *_, election, binding = kueue.kueue_rbac(role, "railyard:kueue", "kueue-system")
    assert election["kind"] == "Role" and election["metadata"]["namespace"] == "kueue-system"
    leases = [r for r in election["rules"] if r["resources"] == ["leases"]]
    assert leases and leases[0]["apiGroups"] == ["coordination.k8s.io"]
    assert {"get", "create", "update"} <= set(leases[0]["verbs"])
    assert binding["roleRef"]["name"] == election["metadata"]["name"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "railyard:kueue"}]


VOLCANO_DAEMONS = [{"name": "vc-scheduler", "cn": "railyard:volcano-scheduler", "cluster_role": "volcano-scheduler"},
                   {"name": "vc-controller-manager", "cn": "railyard:volcano-controllers",
                    "cluster_role": "volcano-controllers"}]


def test_volcano_rbac_binds_upstreams_cluster_roles_to_each_daemons_user():
    roles = "".join(f"---\n# Source: volcano/templates/x.yaml\nkind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\n"
                    f"metadata:\n  name: {n}\nrules:\n  - apiGroups: [x]\n    resources: [{n}]\n    verbs: [get]\n"
                    for n in ("volcano-controllers", "volcano-scheduler"))
    ns, cr1, crb1, cr2, crb2 = volcano.volcano_rbac(roles, VOLCANO_DAEMONS, "volcano-system")
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == "volcano-system"
    assert (cr1["metadata"]["name"], cr1["rules"][0]["resources"]) == ("volcano-scheduler", ["volcano-scheduler"])
    assert crb1["roleRef"]["name"] == "volcano-scheduler"
    assert crb1["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                 "name": "railyard:volcano-scheduler"}]
    assert (cr2["metadata"]["name"], crb2["subjects"][0]["name"]) == ("volcano-controllers", "railyard:volcano-controllers")


def test_volcano_rbac_refuses_a_missing_cluster_role():
    only = "kind: ClusterRole\napiVersion: rbac.authorization.k8s.io/v1\nmetadata: {name: volcano-scheduler}\nrules: []\n"
    with pytest.raises(ValueError, match="ClusterRole volcano-controllers not in upstream"):
        volcano.volcano_rbac(only, VOLCANO_DAEMONS, "volcano-system")


def test_volcano_rbac_reads_the_built_manifest():
    """The ClusterRoles scripts/build-k8s.sh crds cut out of upstream's installer manifest."""
    from railyard.apply.playbooks import lab_k8s_dir

    built = lab_k8s_dir() / "manifests/volcano/roles.yaml"
    assert built.is_file(), f"{built} missing: scripts/build-k8s.sh crds (scripts/bootstrap.sh runs it) makes it"
    docs = volcano.volcano_rbac(built.read_text(), VOLCANO_DAEMONS, "volcano-system")
    rules = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert any("hypernodes" in r.get("resources", []) for r in rules["volcano-scheduler"]), rules["volcano-scheduler"]
    assert any("jobs" in r.get("resources", []) for r in rules["volcano-controllers"])


def _hv(address: str | None, pod_cidr: str | None = None, agent: str | None = None) -> dict:
    hv: dict = {}
    if address is not None:
        hv["railyard_address"] = address
    if pod_cidr is not None:
        hv["railyard_pod_cidr"] = pod_cidr
    if agent is not None:
        hv["railyard_k8s_agent"] = agent
    return hv


def test_pod_routes_go_to_every_other_kubelet_node_for_its_block():
    hostvars = {"kw1": _hv("10.77.0.20", "10.244.0.0/24"), "kw2": _hv("10.77.0.21", "10.244.1.0/24"),
                "kw3": _hv("10.77.0.22", "10.244.2.0/24"), "sim1": _hv("10.77.0.23", "10.244.3.0/24", "kwok")}
    assert worker.k8s_pod_routes(["kw1", "kw2", "kw3", "sim1"], hostvars, "kw2") == [
        {"cidr": "10.244.0.0/24", "via": "10.77.0.20", "node": "kw1"},
        {"cidr": "10.244.2.0/24", "via": "10.77.0.22", "node": "kw3"},
    ]  # not to itself, not to a KWOK node (no pods there)


def test_pod_routes_without_a_plan_use_the_roles_default_blocks():
    hostvars = {"a": _hv("192.0.2.1"), "b": _hv("192.0.2.2")}
    assert worker.k8s_pod_routes(["a", "b"], hostvars, "a") == [{"cidr": "10.244.1.0/24", "via": "192.0.2.2", "node": "b"}]


@pytest.mark.parametrize("address", [None, "kw2.lab", ""])
def test_pod_routes_refuse_a_worker_without_an_address(address):
    with pytest.raises(ValueError, match="worker kw2 has no IPv4 railyard_address"):
        worker.k8s_pod_routes(["kw1", "kw2"], {"kw1": _hv("10.0.0.1"), "kw2": _hv(address)}, "kw1")


def test_routes_missing_compares_block_and_next_hop_with_what_the_kernel_routes():
    planned = [{"cidr": "10.244.0.0/24", "via": "10.77.0.20", "node": "kw1"},
               {"cidr": "10.244.2.0/24", "via": "10.77.0.22", "node": "kw3"}]
    # `ip -json route show proto boot` as iproute2 prints it
    kernel = json.dumps([{"dst": "10.244.0.0/24", "gateway": "10.77.0.20", "dev": "eth0", "protocol": "boot", "flags": []},
                         {"dst": "10.244.2.0/24", "gateway": "10.77.0.99", "dev": "eth0", "protocol": "boot", "flags": []}])
    assert worker.k8s_routes_missing(planned, kernel) == ["10.244.2.0/24 via 10.77.0.22"]  # wrong next hop
    assert worker.k8s_routes_missing(planned, "[]") == ["10.244.0.0/24 via 10.77.0.20", "10.244.2.0/24 via 10.77.0.22"]
    assert worker.k8s_routes_missing(planned, "not json") == ["10.244.0.0/24 via 10.77.0.20", "10.244.2.0/24 via 10.77.0.22"]
    assert worker.k8s_routes_missing([], "") == []


def test_the_nodes_pod_cidr_is_its_block_and_says_which_agent_runs_it():
    cap = {"cpu": "2", "memory": "1000Mi", "pods": "110"}
    node = worker.k8s_node("kw2", {}, cap, "10.0.0.6", {}, "kubelet", "10.244.1.0/24")
    assert node["spec"] == {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}
    assert node["metadata"]["labels"]["railyard.dev/agent"] == "kubelet"
    assert worker.k8s_node_spec(node)["spec"] == node["spec"]  # applied with the labels
    assert "spec" not in worker.k8s_node("kw1", {}, cap, "10.0.0.5")  # no block given: nothing claimed
    with pytest.raises(ValueError):
        worker.k8s_node("kw2", {}, cap, "10.0.0.6", {}, "kubelet", "10.244.1.7/24")  # host bits: a typo

"""What makes `kubectl logs/exec` work, as the roles render it: the apiserver's kubelet
client and the CA it checks kubelets with (kube-apiserver.service.j2), and a kubelet
serving the cluster CA's certificate to callers it authenticates by that CA and
authorises through the apiserver (kubelet-config.yaml.j2). Expected values are literals
(kubeadm's names, the kubelet's configuration fields)."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import yaml

ROOT = Path(__file__).resolve().parent.parent
CP = ROOT / "roles/k8s_control_plane"
WORKER = ROOT / "roles/k8s_worker"


def _render(path: Path, variables: dict) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: "\n".join(f"# {line}" for line in str(text).splitlines())
    return env.from_string(path.read_text()).render(ansible_managed="managed by railyard", **variables)


def _cp_vars() -> dict:
    constants = yaml.safe_load((CP / "vars/main.yml").read_text())
    defaults = yaml.safe_load((CP / "defaults/main.yml").read_text())
    return {"k8s_control_plane_bin_dir": defaults["k8s_control_plane_bin_dir"],
            "k8s_control_plane_version": "1.35.4", "k8s_control_plane_api_port": 6443,
            "k8s_control_plane_service_cidr": "10.96.0.0/16", "k8s_control_plane_config_dir": "/etc/kubernetes",
            "k8s_control_plane_dns_domain": "cluster.local",
            "_k8s_control_plane_address": "10.78.0.16", "_k8s_control_plane_pki": "/etc/kubernetes/pki",
            "_k8s_control_plane_member_addresses": ["10.78.0.16"],
            "_k8s_control_plane_kubelet_client": constants["_k8s_control_plane_kubelet_client"]}


def _flags(unit: str) -> dict[str, str]:
    return dict(re.findall(r"--([a-z0-9-]+)=(\S+)", unit))


def test_the_apiserver_calls_kubelets_as_its_kubelet_client_and_checks_them_with_the_cluster_ca():
    flags = _flags(_render(CP / "templates/kube-apiserver.service.j2", _cp_vars()))
    assert flags["kubelet-client-certificate"] == "/etc/kubernetes/pki/apiserver-kubelet-client.crt"
    assert flags["kubelet-client-key"] == "/etc/kubernetes/pki/apiserver-kubelet-client.key"
    assert flags["kubelet-certificate-authority"] == "/etc/kubernetes/pki/ca.crt"
    assert flags["kubelet-certificate-authority"] == flags["client-ca-file"]
    # the address the kubelet's serving certificate names first (kubeadm's order)
    assert flags["kubelet-preferred-address-types"] == "InternalIP,ExternalIP,Hostname"


def test_the_kubelet_client_is_kubeadms_user_bound_to_kubelet_api_admin_only():
    client = yaml.safe_load((CP / "vars/main.yml").read_text())["_k8s_control_plane_kubelet_client"]
    assert client == {"name": "apiserver-kubelet-client", "cn": "kube-apiserver-kubelet-client",
                      "role": "system:kubelet-api-admin", "binding": "railyard:kube-apiserver-kubelet-client"}


def test_the_kubelet_serves_the_cluster_cas_certificate_to_callers_the_apiserver_authorises():
    for in_container in (False, True):
        config = yaml.safe_load(_render(WORKER / "templates/kubelet-config.yaml.j2", {
            "_k8s_worker_pki": "/etc/kubernetes/kubelet/pki", "k8s_worker_node_in_container": in_container,
            "k8s_worker_cluster_dns": "10.96.0.10", "k8s_worker_dns_domain": "cluster.local"}))
        assert config["tlsCertFile"] == "/etc/kubernetes/kubelet/pki/kubelet-serving.crt"
        assert config["tlsPrivateKeyFile"] == "/etc/kubernetes/kubelet/pki/kubelet-serving.key"
        assert config["authentication"] == {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                            "x509": {"clientCAFile": "/etc/kubernetes/kubelet/pki/ca.crt"}}
        assert config["authorization"] == {"mode": "Webhook"}
        assert config["readOnlyPort"] == 0
        # every pod's resolver is the cluster DNS
        assert (config["clusterDNS"], config["clusterDomain"]) == (["10.96.0.10"], "cluster.local")

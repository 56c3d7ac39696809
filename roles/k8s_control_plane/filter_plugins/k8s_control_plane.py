"""Filters for k8s_control_plane: pure functions, tested in tests/test_k8s_filters.py."""

from __future__ import annotations

import ipaddress
from typing import Any


def k8s_first_service_ip(cidr: str) -> str:
    """The ClusterIP the apiserver gives the ``kubernetes`` Service: the range's first host."""
    net = ipaddress.ip_network(cidr, strict=True)
    return str(next(net.hosts()))


def k8s_user_cluster_role_binding(user: str, role: str, name: str) -> dict[str, Any]:
    """A ClusterRoleBinding of the ClusterRole *role* to the one User *user*.

    Used for the apiserver's kubelet client (``kube-apiserver-kubelet-client`` bound to
    the bootstrap ``system:kubelet-api-admin``): a User subject, not a group in the
    certificate, so the identity holds exactly that role and nothing a group would add.
    """
    if not (user and role and name):
        raise ValueError(f"k8s_user_cluster_role_binding: user, role and name are required (got {user!r}, {role!r}, {name!r})")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def k8s_addresses(hosts: list[str], hostvars: Any) -> list[str]:
    """Each host's address as the other nodes reach it: ``railyard_address`` (railyard
    render writes one per node), else ``ansible_host``, else its name."""
    out = []
    for name in hosts:
        hv = hostvars[name] if name in hostvars else {}
        out.append(str(hv.get("railyard_address") or hv.get("ansible_host") or name))
    return out


def k8s_pki_seed(holders: list[str], hosts: list[str]) -> str:
    """The control-plane node whose CAs the others copy: the first of *hosts* (the plan's
    order) among *holders* (the nodes that hold a CA key), else the first of *hosts*."""
    if not hosts:
        raise ValueError("k8s_pki_seed: no control-plane nodes")
    return next((h for h in hosts if h in set(holders)), hosts[0])


def k8s_cert_defaults(cert: dict[str, Any], pki: str) -> dict[str, Any]:
    """One certificate of ``_k8s_control_plane_certs`` with its defaults filled in: a
    client certificate (clientAuth, no SANs) in *pki*, root's, signed by the cluster CA."""
    if not cert.get("name") or not cert.get("cn"):
        raise ValueError(f"k8s_cert_defaults: a certificate needs a name and a cn, got {cert!r}")
    return {"o": "", "eku": ["clientAuth"], "sans": [], "ca": "ca", "dir": pki, "owner": "root", **cert}


def k8s_etcd_initial_cluster(hosts: list[str], addresses: list[str], port: int = 2380) -> str:
    """etcd's ``--initial-cluster``: every member's name (its node) and peer URL."""
    if len(hosts) != len(addresses):
        raise ValueError(f"k8s_etcd_initial_cluster: {len(hosts)} members but {len(addresses)} addresses")
    return ",".join(f"{h}=https://{a}:{port}" for h, a in zip(hosts, addresses, strict=True))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "k8s_first_service_ip": k8s_first_service_ip,
            "k8s_user_cluster_role_binding": k8s_user_cluster_role_binding,
            "k8s_addresses": k8s_addresses,
            "k8s_pki_seed": k8s_pki_seed,
            "k8s_cert_defaults": k8s_cert_defaults,
            "k8s_etcd_initial_cluster": k8s_etcd_initial_cluster,
        }

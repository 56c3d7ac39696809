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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "k8s_first_service_ip": k8s_first_service_ip,
            "k8s_user_cluster_role_binding": k8s_user_cluster_role_binding,
        }

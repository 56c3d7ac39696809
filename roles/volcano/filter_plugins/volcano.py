"""Filters for the volcano role: pure functions, tested in tests/test_k8s_filters.py."""

from __future__ import annotations

from typing import Any

import yaml


def volcano_rbac(roles_yaml: str, daemons: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Volcano's namespace, then for each daemon upstream's ClusterRole (``cluster_role``,
    from the installer's manifest) and a binding of it to the daemon's client-certificate
    user (``cn``). A ClusterRole missing from *roles_yaml* is an error, not a daemon
    silently left without rights."""
    roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(roles_yaml) if d and d.get("kind") == "ClusterRole"}
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for daemon in daemons:
        name = daemon["cluster_role"]
        if name not in roles:
            raise ValueError(f"volcano_rbac: ClusterRole {name} not in upstream's manifest (have: {sorted(roles)})")
        out.append({"apiVersion": roles[name]["apiVersion"], "kind": "ClusterRole",
                    "metadata": {"name": name}, "rules": roles[name]["rules"]})
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{name}-railyard"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": daemon["cn"]}],
        })
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"volcano_rbac": volcano_rbac}

"""Filters for the kueue role: pure functions, tested in tests/test_k8s_filters.py."""

from __future__ import annotations

import base64
import copy
from typing import Any

import yaml


def kueue_webhooks_by_url(
    docs: list[dict[str, Any]] | str, url: str, ca_pem: str, groups: list[str], prefix: str = "kueue-"
) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, calling a manager that runs outside the cluster.

    Keeps the webhooks whose rules name one of *groups* (Kueue's own and the enabled
    frameworks': a webhook nobody serves would block every write it matches), replaces
    each ``clientConfig.service`` by ``url`` + its path with *ca_pem* as caBundle, and
    adds the name prefix upstream's kustomization adds.
    """
    if isinstance(docs, str):
        docs = [d for d in yaml.safe_load_all(docs) if d]
    ca = base64.b64encode(ca_pem.encode()).decode()
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or not doc.get("webhooks"):
            continue
        doc = copy.deepcopy(doc)
        keep = []
        for wh in doc["webhooks"]:
            named = {g for rule in wh.get("rules", []) for g in rule.get("apiGroups", [])}
            if named & set(groups):
                path = wh["clientConfig"]["service"]["path"]
                wh["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca}
                keep.append(wh)
        if keep:
            doc["metadata"] = {"name": prefix + doc["metadata"]["name"]}
            doc["webhooks"] = keep
            out.append(doc)
    return out


def kueue_rbac(role_yaml: str, user: str, namespace: str, name: str = "kueue-manager-role") -> list[dict[str, Any]]:
    """The manager's namespace, its upstream ClusterRole (renamed as kustomize names it),
    if *role_yaml* has one its upstream Role for Secrets (moved into *namespace*), and the
    Role its leader election needs in *namespace* (upstream keeps that one in
    config/components/rbac/leader_election_role.yaml, which the build does not extract):
    each bound to the manager's client-certificate user."""
    docs = [d for d in yaml.safe_load_all(role_yaml) if d]
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for kind, bound_by, new_name, meta in (
        ("ClusterRole", "ClusterRoleBinding", name, {}),
        ("Role", "RoleBinding", "kueue-manager-secrets-role", {"namespace": namespace}),
    ):
        role = next((d for d in docs if d.get("kind") == kind), None)
        if role is None:
            continue
        out.append({**role, "metadata": {"name": new_name, **meta}})
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": bound_by,
            "metadata": {"name": new_name + "-binding", **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": new_name},
            "subjects": subjects,
        })
    election = "kueue-leader-election-role"
    meta = {"namespace": namespace}
    out.append({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": election, **meta},
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    })
    out.append({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": election + "-binding", **meta},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": election},
        "subjects": subjects,
    })
    return out


def k8s_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Objects as one ``v1/List`` (one document for kubectl, dumped by Ansible's to_nice_yaml)."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kueue_webhooks_by_url": kueue_webhooks_by_url, "kueue_rbac": kueue_rbac,
                "k8s_list": k8s_list}

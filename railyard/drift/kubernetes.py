"""The kubernetes layer, pure half: ``kubectl get ... -o json`` documents -> an observation.

railyard does not deploy the Kubernetes partition yet (its roles are issue 6), so the
collector reports "not deployed"; once it does, the collector runs ``kubectl get nodes
-o json`` and ``kubectl get <kind> -A -o json`` for the kinds the plan has, and these
functions turn the answers into a :class:`KubernetesObservation` for compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from railyard.drift.observed import KubernetesObservation


def labels_from_nodes(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``kubectl get nodes -o json`` -> {node: labels}."""
    out: dict[str, dict[str, str]] = {}
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        out[str(meta.get("name", ""))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return out


def objects_from_lists(docs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """``kubectl get <kind> -A -o json`` documents (kind ``List``) -> their items."""
    items: list[dict[str, Any]] = []
    for doc in docs:
        items += [dict(i) for i in doc.get("items") or []]
    return tuple(items)


def observation(nodes: Mapping[str, Any], lists: Iterable[Mapping[str, Any]]) -> KubernetesObservation:
    return KubernetesObservation(deployed=True, labels=labels_from_nodes(nodes), objects=objects_from_lists(lists))

"""The kubernetes layer, pure half: ``kubectl get ... -o json`` documents -> an observation.

The collector (railyard.drift.collect.collect_kubernetes) runs ``kubectl get nodes -o
json`` and one ``kubectl get <kinds> -A -o json`` for the kinds the plan has
(:func:`kinds_of`) on the control-plane node, with the admin kubeconfig the
k8s_control_plane role writes; these functions turn the answers into a
:class:`KubernetesObservation` for compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from railyard.drift.observed import KubernetesObservation


def kinds_of(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    """``kind.group`` names for ``kubectl get`` (``namespace``, ``clusterqueue.kueue.x-k8s.io``)."""
    return sorted({f"{d['kind'].lower()}.{str(d['apiVersion']).rpartition('/')[0]}".rstrip(".") for d in docs})


def labels_from_nodes(doc: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``kubectl get nodes -o json`` -> {node: labels}."""
    out: dict[str, dict[str, str]] = {}
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        out[str(meta.get("name", ""))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return out


def status_from_nodes(doc: Mapping[str, Any], field: str) -> dict[str, dict[str, str]]:
    """``kubectl get nodes -o json`` -> {node: .status.<field>} (capacity, allocatable)."""
    out: dict[str, dict[str, str]] = {}
    for item in doc.get("items") or []:
        name = str((item.get("metadata") or {}).get("name", ""))
        out[name] = {str(k): str(v) for k, v in ((item.get("status") or {}).get(field) or {}).items()}
    return out


_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}


def quantity(value: str) -> Decimal | None:
    """A Kubernetes resource quantity (``2``, ``1000Mi``, ``24683664Ki``, ``500m``) as a
    number, so ``1Gi`` and ``1024Mi`` compare equal; None when it is not one."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)]:
            text, scale = text[: -len(suffix)], Decimal(_SUFFIXES[suffix])
            break
    else:
        scale = Decimal(1)
    try:
        number = Decimal(text) * scale
    except InvalidOperation:
        return None
    return number if number.is_finite() else None  # "NaN" and "Infinity" are no quantities


def objects_from_lists(docs: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """``kubectl get <kind> -A -o json`` documents (kind ``List``) -> their items."""
    items: list[dict[str, Any]] = []
    for doc in docs:
        items += [dict(i) for i in doc.get("items") or []]
    return tuple(items)


def observation(nodes: Mapping[str, Any], lists: Iterable[Mapping[str, Any]]) -> KubernetesObservation:
    return KubernetesObservation(deployed=True, labels=labels_from_nodes(nodes), capacity=status_from_nodes(nodes, "capacity"),
                                 allocatable=status_from_nodes(nodes, "allocatable"), objects=objects_from_lists(lists))

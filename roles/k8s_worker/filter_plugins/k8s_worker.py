"""Filters for k8s_worker: pure functions, tested in tests/test_k8s_filters.py."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import yaml

AGENT_LABEL = "railyard.dev/agent"


def k8s_node(
    name: str,
    labels: dict[str, str],
    capacity: dict[str, str],
    address: str,
    annotations: dict[str, str] | None = None,
    agent: str = "kwok",
    pod_cidr: str | None = None,
) -> dict[str, Any]:
    """The Node a worker registers: the plan's labels, and the plan's capacity in status.

    *capacity* is the compiler's (``railyard_node_capacity``: CPUs, memory, pods and
    ``nvidia.com/gpu`` in the apiserver's own form), so Kueue's quotas and kube-scheduler
    count the same GPUs as Slurm's gres.conf does. With KWOK (*agent* ``kwok``) status
    carries all of it. A real kubelet measures CPUs, memory, pods and addresses itself:
    then only the extended resources (``nvidia.com/gpu``, as a device plugin would
    advertise them) are set, and status is empty on a node without GPUs.

    The label ``railyard.dev/agent`` says which: what must run a container (CoreDNS)
    selects ``kubelet``. *pod_cidr*, the node's block of the plan's pod network, is the
    Node's ``spec.podCIDR`` (which the apiserver lets be set once).
    """
    if agent not in ("kwok", "kubelet"):
        raise ValueError(f"k8s_node: agent must be kwok or kubelet, not {agent!r}")
    cap = {str(k): str(v) for k, v in capacity.items() if agent == "kwok" or "/" in str(k)}
    meta: dict[str, Any] = {
        "name": name,
        "labels": {**labels, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", AGENT_LABEL: agent},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    status: dict[str, Any] = {"capacity": cap, "allocatable": cap} if cap else {}
    if agent == "kwok":
        status["addresses"] = [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
    if pod_cidr:
        node["spec"] = {"podCIDR": str(ipaddress.IPv4Network(pod_cidr)), "podCIDRs": [str(ipaddress.IPv4Network(pod_cidr))]}
    return {**node, "status": status}


def k8s_node_status_differs(observed: dict[str, Any] | str, node: dict[str, Any]) -> bool:
    """Whether the apiserver's Node status lacks what railyard sets: each capacity and
    allocatable entry of *node* (the agent's own entries are left alone)."""
    import json

    if isinstance(observed, str):
        # node.yml reads `jsonpath={.status.capacity}{"\n"}{.status.allocatable}`: two JSON
        # maps (or empty lines), an output that stays the same while the Node does
        lines = observed.strip("\n").split("\n")
        if len(lines) == 2:
            observed = {f: json.loads(line) if line.strip() else {} for f, line in zip(("capacity", "allocatable"), lines)}
        else:
            observed = json.loads(observed) if observed.strip() else {}
    for field in ("capacity", "allocatable"):
        have = (observed or {}).get(field) or {}
        if any(have.get(k) != v for k, v in node.get("status", {}).get(field, {}).items()):
            return True
    return False


def k8s_node_status(node: dict[str, Any]) -> dict[str, Any]:
    """The part of a Node that goes through the status subresource."""
    return {"apiVersion": node["apiVersion"], "kind": node["kind"],
            "metadata": {"name": node["metadata"]["name"]}, "status": node["status"]}


def k8s_node_spec(node: dict[str, Any]) -> dict[str, Any]:
    """The Node without status (the main resource ignores status on update)."""
    return {k: v for k, v in node.items() if k != "status"}


def k8s_serving_sans(name: str, addresses: list[str]) -> list[str]:
    """The subjectAltNames of a kubelet's serving certificate: the node's name and each
    of its addresses, ``IP:`` for an IP address and ``DNS:`` for a name, without repeats.

    The apiserver reaches a kubelet at the Node's InternalIP (kube-apiserver
    ``--kubelet-preferred-address-types``) and checks that address against these SANs
    (``--kubelet-certificate-authority``); the name covers a Hostname address.
    """
    if not name:
        raise ValueError("k8s_serving_sans: the node name is required")
    out: list[str] = []
    for value in [name, *addresses]:
        value = str(value).strip()
        if not value:
            continue
        try:
            san = f"IP:{ipaddress.ip_address(value)}"
        except ValueError:
            san = f"DNS:{value}"
        if san not in out:
            out.append(san)
    return out


def k8s_worker_rbac(role_yaml: str, group: str) -> dict[str, Any]:
    """KWOK's upstream ClusterRole and a binding of it to *group*, as one List."""
    role = next(d for d in yaml.safe_load_all(role_yaml) if d and d.get("kind") == "ClusterRole")
    name = role["metadata"]["name"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
    return {"apiVersion": "v1", "kind": "List", "items": [role, binding]}


def k8s_pod_routes(workers: list[str], hostvars: Any, me: str) -> list[dict[str, str]]:
    """The routes *me* needs to the other workers' pods: each real kubelet node's pod
    block (its ``railyard_pod_cidr``; without a plan, ``10.244.<index>.0/24`` as the role's
    default) via its address (``railyard_address``). A KWOK node runs no pods: no route.

    A worker without an address cannot be routed to: that is an error naming the node,
    not a route left out.
    """
    routes: list[dict[str, str]] = []
    for i, name in enumerate(workers):
        hv = hostvars[name]
        agent = hv.get("railyard_k8s_agent") or hv.get("k8s_worker_kubelet") or "kubelet"
        if name == me or agent == "kwok":
            continue
        via = str(hv.get("railyard_address") or "")
        try:
            ipaddress.IPv4Address(via)
        except ValueError:
            raise ValueError(
                f"k8s_pod_routes: worker {name} has no IPv4 railyard_address ({via!r}): the other nodes "
                "route its pods' block to that address; set railyard_address (railyard render does)"
            ) from None
        cidr = str(ipaddress.IPv4Network(hv.get("railyard_pod_cidr") or f"10.244.{i}.0/24"))
        routes.append({"cidr": cidr, "via": via, "node": name})
    return routes


def k8s_routes_missing(planned: list[dict[str, str]], ip_json: str) -> list[str]:
    """The planned routes (:func:`k8s_pod_routes`) the kernel does not have, as
    ``<cidr> via <address>``, from ``ip -json route show`` (a route to the right block
    through another node is missing too). Unreadable output: all of them."""
    try:
        have = {(r.get("dst"), r.get("gateway")) for r in json.loads(ip_json or "[]") if isinstance(r, dict)}
    except ValueError:
        have = set()
    return [f"{r['cidr']} via {r['via']}" for r in planned if (r["cidr"], r["via"]) not in have]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"k8s_node": k8s_node, "k8s_worker_rbac": k8s_worker_rbac, "k8s_node_status": k8s_node_status,
                "k8s_node_spec": k8s_node_spec, "k8s_node_status_differs": k8s_node_status_differs,
                "k8s_serving_sans": k8s_serving_sans, "k8s_pod_routes": k8s_pod_routes,
                "k8s_routes_missing": k8s_routes_missing}

"""The Ansible inventory: groups by role, partition and SU; host vars from the plan."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from railyard.compiler.fabric import Fabric
from railyard.compiler.kubernetes import KubernetesPlan
from railyard.compiler.nodes import K8S_ROLES, SLURM_ROLES, Node
from railyard.compiler.slurm import SlurmPlan, gpu_devices
from railyard.compiler.storage import StoragePlan
from railyard.hostlist import expand
from railyard.spec import Cluster, Gpus


@dataclass(frozen=True)
class Inventory:
    groups: dict[str, tuple[str, ...]]  # group -> hosts
    children: dict[str, tuple[str, ...]]  # group -> child groups
    hostvars: dict[str, dict[str, Any]]


def container_name(cluster: str, node: str) -> str:
    """The podman container of a lab node; the hostname inside it is the node name."""
    return f"railyard-{cluster}-{node}"


def group_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _connection(cluster: Cluster, node: Node) -> dict[str, Any]:
    provision = cluster.nodes[node.group_index].provision
    if provision.driver == "podman":
        return {
            "ansible_connection": "containers.podman.podman",
            "ansible_host": container_name(cluster.cluster.name, node.name),
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    out: dict[str, Any] = {
        "ansible_host": node.address,
        "ansible_user": provision.ssh_user,
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    if provision.bmc is not None:
        # The password stays a reference; the Redfish driver resolves it, Ansible never sees it.
        out["railyard_bmc_address"] = provision.bmc.address.format(name=node.name)
        out["railyard_bmc_username"] = provision.bmc.username
    return out


@functools.cache
def _gpus(gpus: Gpus) -> dict[str, Any]:
    return {
        "type": gpus.type,
        "count": gpus.count,
        "devices": expand(gpu_devices(gpus)),
        "stand_in": gpus.stand_in,
    }


def compile_inventory(
    cluster: Cluster,
    nodes: list[Node],
    fabric: Fabric | None,
    slurm: SlurmPlan | None,
    k8s: KubernetesPlan | None,
    storage: StoragePlan,
) -> Inventory:
    groups: dict[str, list[str]] = {}

    def add(group: str, host: str) -> None:
        groups.setdefault(group, []).append(host)

    for n in nodes:
        for role in n.roles:
            add(role, n.name)
    # Which rendered units (storage/units/<unit>) each client host gets, by type: a spec
    # may mount different filesystems on different nodes.
    mounts_of: dict[str, dict[str, list[str]]] = {}
    clients: dict[str, set[str]] = {"nfs_client": set(), "lustre_client": set()}
    for mount in storage.mounts:
        for host in mount.clients:
            group = "nfs_client" if mount.type == "nfs" else "lustre_client"
            if host not in clients[group]:
                clients[group].add(host)
                add(group, host)
            mounts_of.setdefault(host, {}).setdefault(mount.type, []).append(mount.unit)
    if slurm is not None:
        for part in slurm.partitions:
            for host in expand(part.hostlist):
                add(f"slurm_partition_{group_name(part.name)}", host)
    where = fabric.level_of() if fabric else {}
    if fabric is not None:
        for su in fabric.groups.get("su", ()):
            for host in su.nodes:
                add(f"fabric_{group_name(su.name)}", host)

    children = {
        "slurm": tuple(r for r in SLURM_ROLES if r in groups),
        "kubernetes": tuple(r for r in K8S_ROLES if r in groups),
    }
    children = {k: v for k, v in children.items() if v}

    hostvars: dict[str, dict[str, Any]] = {}
    for n in nodes:
        hw = n.hardware
        hv: dict[str, Any] = {
            **_connection(cluster, n),
            "railyard_address": n.address,
            "railyard_group": n.group,
            "railyard_partition": n.partition,
            "railyard_hardware": {
                "sockets": hw.sockets,
                "cores_per_socket": hw.cores_per_socket,
                "threads_per_core": hw.threads_per_core,
                "memory_mb": hw.memory_mb,
                "nics": hw.nics,
            },
            "railyard_fabric": dict(sorted(where.get(n.name, {}).items())),
        }
        if hw.gpus is not None:
            hv["railyard_gpus"] = _gpus(hw.gpus)
        if k8s is not None and n.name in k8s.labels:
            hv["railyard_node_labels"] = k8s.labels[n.name]
        mounts = mounts_of.get(n.name)
        if mounts:
            hv["railyard_mount_units"] = mounts
        hostvars[n.name] = hv
    return Inventory(
        groups={k: tuple(v) for k, v in sorted(groups.items())},
        children=children,
        hostvars=hostvars,
    )


def to_ansible(inv: Inventory, cluster_vars: dict[str, Any]) -> dict[str, Any]:
    """The YAML inventory format (``ansible-inventory -i inventory.yaml``)."""
    child_groups: dict[str, Any] = {}
    nested = {c for cs in inv.children.values() for c in cs}
    for group, hosts in inv.groups.items():
        if group not in nested:
            child_groups[group] = {"hosts": {h: None for h in hosts}}
    for parent, kids in inv.children.items():
        child_groups[parent] = {"children": {k: {"hosts": {h: None for h in inv.groups[k]}} for k in kids}}
    return {
        "all": {
            "vars": cluster_vars,
            "hosts": {h: hv for h, hv in inv.hostvars.items()},
            "children": child_groups,
        }
    }


def to_script(plan: Any) -> dict[str, Any]:
    """The inventory-script JSON (``ansible-inventory --list``): groups, children, _meta."""
    inv = plan.inventory
    out: dict[str, Any] = {"_meta": {"hostvars": inv.hostvars}}
    nested = {c for cs in inv.children.values() for c in cs}
    for group, hosts in inv.groups.items():
        out[group] = {"hosts": list(hosts)}
    for parent, kids in inv.children.items():
        out[parent] = {"children": list(kids)}
    out["all"] = {
        "children": sorted(set(inv.groups) - nested | set(inv.children)),
        "vars": {"railyard_cluster": plan.name, "railyard_domain": plan.spec.cluster.domain},
    }
    return out

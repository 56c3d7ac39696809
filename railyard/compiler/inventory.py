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
            hv["railyard_node_capacity"] = k8s.capacity[n.name]
            hv["railyard_pod_cidr"] = k8s.network.pod_cidrs[n.name]
            # roles/k8s_worker's k8s_worker_kubelet follows it: per host, so a Kubernetes
            # partition may mix real and simulated workers
            hv["railyard_k8s_agent"] = k8s.agents[n.name]
        mounts = mounts_of.get(n.name)
        if mounts:
            hv["railyard_mount_units"] = mounts
        hostvars[n.name] = hv
    return Inventory(
        groups={k: tuple(v) for k, v in sorted(groups.items())},
        children=children,
        hostvars=hostvars,
    )


# Per host in the inventory file: where and how Ansible connects (deploy's podman
# connection override reads them there, railyard.apply.playbooks.podman_overrides).
CONNECTION_VARS = ("ansible_connection", "ansible_host", "ansible_user", "ansible_python_interpreter")


def members(inv: Inventory) -> dict[str, tuple[str, ...]]:
    """Hosts of every group, parent groups (slurm, kubernetes) included."""
    out = dict(inv.groups)
    for parent, kids in inv.children.items():
        # a host in two of the kids (slurmdbd on a controller) is a member once
        out[parent] = tuple(dict.fromkeys(h for kid in kids for h in inv.groups[kid]))
    return out


def split_vars(inv: Inventory) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``(group_vars, host_vars)``: each host variable that is the same for every host of a
    group moves to that group, the largest such group first.

    A host gets every variable from exactly one place (one group, or itself): a group
    takes a variable only if none of its hosts has it from a group already, so Ansible's
    precedence between groups, and between groups and hosts, never decides a value, and
    each host's merged variables are ``inv.hostvars[host]``. Groups of one host and the
    connection variables are left alone."""
    hosts_of = members(inv)
    hostvars = inv.hostvars
    grouped: dict[str, dict[str, Any]] = {}
    placed: dict[str, set[str]] = {}  # variable -> hosts that get it from a group
    for group in sorted(hosts_of, key=lambda g: (-len(hosts_of[g]), g)):
        hosts = hosts_of[group]
        if len(hosts) < 2:
            continue
        for key, value in hostvars[hosts[0]].items():
            taken = placed.setdefault(key, set())
            if key in CONNECTION_VARS or not taken.isdisjoint(hosts):
                continue
            if all(key in hostvars[h] and hostvars[h][key] == value for h in hosts):
                grouped.setdefault(group, {})[key] = value
                taken.update(hosts)
    own = {
        host: {k: v for k, v in hv.items() if host not in placed.get(k, ())}
        for host, hv in hostvars.items()
    }
    return dict(sorted(grouped.items())), own


def to_ansible(inv: Inventory, cluster_vars: dict[str, Any], host_vars: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The YAML inventory format (``ansible-inventory -i inventory.yaml``); ``host_vars``
    are the variables written with each host (the rest are in group_vars files)."""
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
            "hosts": host_vars,
            "children": child_groups,
        }
    }


def cluster_vars(plan: Any) -> dict[str, Any]:
    """Variables every host gets (inventory ``all.vars`` and group_vars/all).

    railyard_slurm_version: the Slurm roles compare the installed release with it.
    railyard_kubernetes_version, railyard_kueue_version, railyard_volcano_version: the
    spec's cluster.versions, which the Kubernetes roles compare what they installed with
    (kube-apiserver's and the kubelet's major.minor, Kueue's and Volcano's x.y.z).
    railyard_slurm_mpi_default: slurm.conf's MpiDefault; with pmix the compute and login
    roles install an MPI built with PMIx (Debian's OpenMPI).
    railyard_slurm_config_delivery: ``configless`` or ``files``, how the Slurm roles deliver
    slurm.conf (set only with a Slurm partition).
    railyard_slurm_pam_slurm_adopt, railyard_slurm_admin_group: whether the spec has
    partitions.slurm.pam_slurm_adopt (slurm_compute then puts it in sshd's PAM stack), and
    the group it lets in besides root (set only with it).
    railyard_kueue_fair_sharing: the spec's partitions.kubernetes.kueue.fair_sharing (the kueue
    role's manager configuration; set only with a Kubernetes partition).
    railyard_k8s_pod_cidr, railyard_k8s_service_cidr, railyard_k8s_cluster_dns,
    railyard_k8s_dns_domain: the Kubernetes partition's addresses (spec
    partitions.kubernetes.network); each worker's own block is its railyard_pod_cidr.
    """
    slurm = plan.spec.partitions.slurm
    versions = plan.spec.cluster.versions
    out = {
        "railyard_cluster": plan.name,
        "railyard_domain": plan.spec.cluster.domain,
        "railyard_slurm_version": versions.slurm,
        "railyard_kubernetes_version": versions.kubernetes,
        "railyard_kueue_version": versions.kueue,
        "railyard_volcano_version": versions.volcano,
        "railyard_slurm_mpi_default": slurm.mpi_default if slurm else "none",
        "railyard_slurm_pam_slurm_adopt": bool(slurm and slurm.pam_slurm_adopt),
    }
    if slurm is not None and slurm.pam_slurm_adopt is not None:
        out["railyard_slurm_admin_group"] = slurm.pam_slurm_adopt.admin_group
    if plan.slurm is not None:
        out["railyard_slurm_config_delivery"] = plan.slurm.config_delivery
    if plan.kubernetes is not None:
        net = plan.kubernetes.network
        out |= {"railyard_k8s_pod_cidr": net.pod_cidr, "railyard_k8s_service_cidr": net.service_cidr,
                "railyard_k8s_cluster_dns": net.cluster_dns, "railyard_k8s_dns_domain": net.dns_domain}
        spec_k8s = plan.spec.partitions.kubernetes
        out["railyard_kueue_fair_sharing"] = bool(spec_k8s and spec_k8s.kueue.enabled and spec_k8s.kueue.fair_sharing)
    return out


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
        "vars": cluster_vars(plan),
    }
    return out

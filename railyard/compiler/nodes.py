"""Nodes: names expanded, addresses assigned, roles and partition decided.

Validation and the compiler both call :func:`resolve_nodes`, so what is checked is exactly
what is built. Problems are collected, never raised one at a time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from railyard.errors import Problem
from railyard.fieldtypes import hostname_problem
from railyard.hostlist import HostlistError, expand
from railyard.spec import Cluster, Hardware, NodeGroup, Provision

# Roles a node can hold. A node's partition follows from them: slurm_* -> "slurm",
# k8s_* -> "kubernetes"; storage roles belong to no partition. slurmdbd (Slurm's accounting
# daemon) runs on a controller or a node of its own.
SLURM_ROLES = ("slurm_controller", "slurm_login", "slurm_compute", "slurmdbd")
K8S_ROLES = ("k8s_control_plane", "k8s_worker")
STORAGE_ROLES = ("nfs_server",)
# A spare holds this role alone: the inventory group 'spare', in no scheduler.
SPARE_ROLE = "spare"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    group: str
    group_index: int  # index into spec.nodes, for error paths
    address: str
    hardware: Hardware
    roles: tuple[str, ...]
    provision: Provision = field(default_factory=Provision)  # how railyard reaches it: driver, ssh user, BMC

    @property
    def spare(self) -> bool:
        return SPARE_ROLE in self.roles

    @property
    def partition(self) -> str | None:
        if any(r in SLURM_ROLES for r in self.roles):
            return "slurm"
        if any(r in K8S_ROLES for r in self.roles):
            return "kubernetes"
        return None


def in_lab(nodes: Iterable[Node]) -> bool:
    """Every node is a podman container on this machine (the lab), none is real."""
    return all(n.provision.driver == "podman" for n in nodes)


def hostlist_field(
    value: str, path: str, known: dict[str, object], problems: list[Problem]
) -> list[str]:
    """Expand a hostlist field; every name must be a node of the spec."""
    try:
        names = expand(value)
    except HostlistError as exc:
        problems.append(Problem(path, f"{exc}; write e.g. gpu[001-032],login1"))
        return []
    unknown = [n for n in names if n not in known]
    if unknown:
        problems.append(
            Problem(
                path,
                f"{_few(unknown)} not a node of this spec; add it under 'nodes' or fix the name",
            )
        )
    seen: set[str] = set()
    dups = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
    if dups:
        problems.append(Problem(path, f"{_few(dups)} listed twice; list each node once"))
    return [n for n in names if n in known]


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{shown} {'is' if len(names) == 1 else 'are'}"


def _group_names(cluster: Cluster, problems: list[Problem]) -> list[tuple[int, NodeGroup, list[str]]]:
    out = []
    seen_groups: dict[str, int] = {}
    for gi, group in enumerate(cluster.nodes):
        path = f"nodes[{gi}]"
        if group.group in seen_groups:
            problems.append(
                Problem(
                    f"{path}.group",
                    f"group name '{group.group}' is already used by nodes[{seen_groups[group.group]}]; "
                    "give each group its own name",
                )
            )
        seen_groups.setdefault(group.group, gi)
        try:
            names = group.hostnames()
        except HostlistError as exc:
            problems.append(Problem(f"{path}.names", f"{exc}; write e.g. gpu[001-032]"))
            names = []
        except (ValueError, KeyError, IndexError) as exc:
            problems.append(Problem(f"{path}.pattern", f"cannot format the pattern: {exc}"))
            names = []
        for name in names:
            bad = hostname_problem(name)
            if bad:
                problems.append(Problem(path, f"node {name!r} of group '{group.group}': {bad}"))
                break
        out.append((gi, group, names))
    return out


def _roles_by_node(
    cluster: Cluster, known: dict[str, object], spares: dict[str, int], problems: list[Problem]
) -> dict[str, list[str]]:
    """Roles from the partitions and storage; ``spares`` (name -> its group's index) get
    the spare role, and any other role given to one is refused where it is given."""
    roles: dict[str, list[str]] = {n: [SPARE_ROLE] if n in spares else [] for n in known}

    def claim(value: str | None, path: str, role: str) -> None:
        if value is None:
            return
        refused = []
        for name in hostlist_field(value, path, known, problems):
            if name in spares:
                refused.append(name)
            elif role not in roles[name]:
                roles[name].append(role)
        if refused:
            gi = spares[refused[0]]
            problems.append(
                Problem(
                    path,
                    f"{_few(refused)} {'a spare' if len(refused) == 1 else 'spares'} (nodes[{gi}] "
                    f"'{cluster.nodes[gi].group}' has spare: true), and a spare is in no scheduler and serves "
                    f"no role: take {'it' if len(refused) == 1 else 'them'} "
                    "out of here, or move the node to a group without spare: true to put it in service",
                )
            )

    slurm = cluster.partitions.slurm
    if slurm is not None:
        claim(slurm.controllers, "partitions.slurm.controllers", "slurm_controller")
        claim(slurm.login, "partitions.slurm.login", "slurm_login")
        for pi, part in enumerate(slurm.partitions):
            claim(part.nodes, f"partitions.slurm.partitions[{pi}].nodes", "slurm_compute")
        if slurm.accounting is not None:
            claim(slurm.accounting.host, "partitions.slurm.accounting.host", "slurmdbd")
    k8s = cluster.partitions.kubernetes
    if k8s is not None:
        claim(k8s.control_plane, "partitions.kubernetes.control_plane", "k8s_control_plane")
        claim(k8s.workers, "partitions.kubernetes.workers", "k8s_worker")
    nfs = cluster.storage.nfs
    if nfs is not None:
        claim(nfs.server, "storage.nfs.server", "nfs_server")
    return roles


def resolve_nodes(cluster: Cluster) -> tuple[list[Node], list[Problem]]:
    problems: list[Problem] = []
    groups = _group_names(cluster, problems)

    first_seen: dict[str, str] = {}
    for gi, _group, names in groups:
        for name in names:
            where = f"nodes[{gi}]"
            if name in first_seen:
                problems.append(
                    Problem(
                        f"{where}.names" if _group.names else f"{where}.pattern",
                        f"hostname '{name}' is also in {first_seen[name]}; every node needs its own name",
                    )
                )
            else:
                first_seen[name] = where

    addresses = _assign_addresses(cluster, groups, problems)
    spares = {name: gi for gi, group, names in groups if group.spare for name in names}
    roles = _roles_by_node(cluster, first_seen, spares, problems)

    nodes: list[Node] = []
    placed: set[str] = set()
    for gi, group, names in groups:
        for name in names:
            if name in placed:
                continue
            placed.add(name)
            nodes.append(
                Node(
                    name=name,
                    group=group.group,
                    group_index=gi,
                    address=addresses.get(name, ""),
                    hardware=group.hardware,
                    roles=tuple(sorted(roles.get(name, []))),
                    provision=group.provision,
                )
            )
    _check_partitions(nodes, problems)
    return nodes, problems


def _assign_addresses(
    cluster: Cluster, groups: list[tuple[int, NodeGroup, list[str]]], problems: list[Problem]
) -> dict[str, str]:
    """Deterministic: spec order, skipping taken addresses; overrides and pinned starts win."""
    net = cluster.network.management.cidr
    first = cluster.network.management.first_host
    usable_hi = int(net.broadcast_address) - 1 if net.prefixlen < 31 else int(net.broadcast_address)
    taken: dict[int, str] = {}
    out: dict[str, str] = {}

    network, broadcast = int(net.network_address), int(net.broadcast_address)

    def inside(addr: ipaddress.IPv4Address) -> bool:
        return network < int(addr) < broadcast  # in the network, and neither of those two

    # Explicit per-node addresses first, so automatic ones flow around them.
    for gi, group, names in groups:
        members = set(names)
        for name, addr in sorted(group.addresses.items()):
            path = f"nodes[{gi}].addresses.{name}"
            if name not in members:
                problems.append(Problem(path, f"'{name}' is not a node of group '{group.group}'; fix the name"))
                continue
            if not inside(addr):
                problems.append(
                    Problem(path, f"{addr} is outside the management network {net} (or is its network/broadcast address); pick an address inside it")
                )
                continue
            if int(addr) in taken:
                problems.append(Problem(path, f"{addr} is already the address of {taken[int(addr)]}; give each node its own"))
                continue
            taken[int(addr)] = name
            out[name] = str(addr)

    cursor = int(net.network_address) + first
    for gi, group, names in groups:
        if group.first_address is not None:
            if not inside(group.first_address):
                problems.append(
                    Problem(f"nodes[{gi}].first_address", f"{group.first_address} is outside the management network {net}; pick an address inside it")
                )
                continue
            cursor = int(group.first_address)
        for name in names:
            if name in out:
                continue
            if group.first_address is not None and cursor in taken:
                # A pinned range is a promise: moving a node past a taken address would
                # renumber it silently.
                problems.append(
                    Problem(
                        f"nodes[{gi}].first_address",
                        f"{name} would get {ipaddress.IPv4Address(cursor)} from the pinned first_address "
                        f"{group.first_address}, but that is already the address of {taken[cursor]}; pin "
                        f"this group where its {len(names)} addresses are free, or move {taken[cursor]}",
                    )
                )
                return out
            while cursor in taken:
                cursor += 1
            if cursor > usable_hi:
                problems.append(
                    Problem("network.management.cidr", f"{net} has no address left for {name}; use a larger CIDR or a lower first_host")
                )
                return out
            taken[cursor] = name
            out[name] = str(ipaddress.IPv4Address(cursor))
            cursor += 1
    return out


def _check_partitions(nodes: list[Node], problems: list[Problem]) -> None:
    for node in nodes:
        path = f"nodes[{node.group_index}]"
        slurm = [r for r in node.roles if r in SLURM_ROLES]
        k8s = [r for r in node.roles if r in K8S_ROLES]
        if slurm and k8s:
            problems.append(
                Problem(
                    path,
                    f"node {node.name} is in two partitions (Slurm as {', '.join(slurm)}; Kubernetes as "
                    f"{', '.join(k8s)}); remove it from one of them",
                )
            )
        if "slurm_compute" in node.roles and ("slurm_controller" in node.roles or "slurm_login" in node.roles):
            problems.append(
                Problem(
                    path,
                    f"node {node.name} is a Slurm compute node and also a controller/login node; "
                    "run slurmctld and logins on their own nodes",
                )
            )
        if "slurm_compute" in node.roles and "slurmdbd" in node.roles:
            problems.append(
                Problem(
                    "partitions.slurm.accounting.host",
                    f"node {node.name} is a Slurm compute node; slurmdbd and its database run on a "
                    "controller or a node of their own: name one there",
                )
            )
        if "k8s_control_plane" in node.roles and "k8s_worker" in node.roles:
            problems.append(
                Problem(path, f"node {node.name} is both Kubernetes control plane and worker; pick one")
            )
        if not node.roles:
            problems.append(
                Problem(
                    path,
                    f"node {node.name} is in no partition and serves no role; add it to "
                    "partitions.slurm.partitions[].nodes, partitions.kubernetes.workers, ..., keep it as a "
                    "spare (spare: true on its group), or remove it",
                )
            )

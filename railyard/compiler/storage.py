"""Shared storage: NFS exports (kernel and nfs-ganesha forms), client mount units, LNet config."""

from __future__ import annotations

from dataclasses import dataclass

from railyard.compiler.nodes import Node
from railyard.hostlist import expand
from railyard.spec import Cluster


@dataclass(frozen=True, slots=True)
class Export:
    export_id: int
    path: str
    clients: str  # CIDR
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MountUnit:
    unit: str  # systemd unit name, e.g. shared-data.mount
    what: str
    where: str
    type: str  # nfs | lustre
    options: tuple[str, ...]
    clients: tuple[str, ...]


@dataclass(frozen=True)
class StoragePlan:
    nfs_server: str | None
    exports: tuple[Export, ...]
    mounts: tuple[MountUnit, ...]
    lnet_networks: str | None  # options lnet networks="..."
    lustre_clients: tuple[str, ...]


def systemd_escape_path(path: str) -> str:
    """What ``systemd-escape --path`` prints: the unit-name form of a path."""
    trimmed = "/".join(p for p in path.split("/") if p)
    if not trimmed:
        return "-"
    out = []
    for i, ch in enumerate(trimmed):
        if ch == "/":
            out.append("-")
        elif ch.isascii() and (ch.isalnum() or ch in ":_" or (ch == "." and i > 0)):
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode()))
    return "".join(out)


def _clients(value: str, nodes: list[Node], exclude: set[str]) -> tuple[str, ...]:
    if value == "all":
        return tuple(n.name for n in nodes if n.name not in exclude)
    return tuple(expand(value))


def compile_storage(cluster: Cluster, nodes: list[Node]) -> StoragePlan:
    nfs = cluster.storage.nfs
    lustre = cluster.storage.lustre
    exports: list[Export] = []
    mounts: list[MountUnit] = []
    server = None
    if nfs is not None:
        server = expand(nfs.server)[0]
        mgmt = str(cluster.network.management.cidr)
        exports = [
            Export(i + 1, e.path, str(e.clients) if e.clients else mgmt, tuple(e.options))
            for i, e in enumerate(nfs.exports)
        ]
        for m in nfs.mounts:
            mounts.append(
                MountUnit(
                    unit=systemd_escape_path(m.mount_point) + ".mount",
                    what=f"{server}:{m.export}",
                    where=m.mount_point,
                    type="nfs",
                    options=tuple(m.options),
                    clients=_clients(m.clients, nodes, {server}),
                )
            )
    lnet = None
    lustre_clients: tuple[str, ...] = ()
    if lustre is not None:
        lnet = ",".join(f"{n.net}({n.interface})" for n in lustre.networks)
        what = ":".join(",".join(nids) for nids in lustre.mgs) + f":/{lustre.fsname}"
        lustre_clients = _clients(lustre.clients, nodes, set())
        mounts.append(
            MountUnit(
                unit=systemd_escape_path(lustre.mount_point) + ".mount",
                what=what,
                where=lustre.mount_point,
                type="lustre",
                options=tuple(lustre.options),
                clients=lustre_clients,
            )
        )
    return StoragePlan(server, tuple(exports), tuple(mounts), lnet, lustre_clients)

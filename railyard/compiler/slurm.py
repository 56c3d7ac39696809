"""Slurm: NodeName/PartitionName lines, GRES, and topology (tree, block or topology.yaml)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from railyard.compiler.fabric import Fabric
from railyard.compiler.nodes import Node
from railyard.hostlist import expand
from railyard.hostlist import fold as _fold
from railyard.spec import Cluster, Gpus, Hardware, Slurm, version_at_least


@dataclass(frozen=True, slots=True)
class NodeLine:
    hostlist: str
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory: int
    gres: str | None  # gpu:h100:8


@dataclass(frozen=True, slots=True)
class GresLine:
    hostlist: str
    type: str
    devices: str
    count: int


@dataclass(frozen=True, slots=True)
class PartitionLine:
    name: str
    hostlist: str
    default: bool
    max_time: str
    default_time: str | None
    def_cpu_per_gpu: int | None
    def_mem_per_gpu: int | None
    topology: str | None
    grace_time: int | None = None


@dataclass(frozen=True, slots=True)
class TopoSwitch:
    name: str
    nodes: str | None  # hostlist, for leaf-level switches
    switches: str | None  # hostlist of child switches


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    nodes: str


@dataclass(frozen=True)
class SlurmPlan:
    cluster_name: str
    version: str
    controllers: tuple[str, ...]
    login: tuple[str, ...]
    compute: tuple[str, ...]
    nodes: tuple[NodeLine, ...]
    gres: tuple[GresLine, ...]
    partitions: tuple[PartitionLine, ...]
    topology_plugin: str | None  # topology/tree | topology/block | None (flat, or topology.yaml)
    topology_format: str  # none | tree | block | yaml
    switches: tuple[TopoSwitch, ...]
    blocks: tuple[Block, ...]
    block_sizes: tuple[int, ...]
    yaml_default: str | None  # topology.yaml: which topology is the cluster default
    settings: Slurm
    config_delivery: str = "files"  # configless | files
    slurmctld_parameters: tuple[str, ...] = ()  # SlurmctldParameters=, one line


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")
_RANGE_INSIDE = re.compile(r"\][^,]")  # a range with more of the name after it


def fold(names: Iterable[str]) -> str:
    """A hostlist slurmctld reads back. Slurm (22.05 checked) only takes a range at the end
    of a name: ClusterShell folds lf3-0,lf4-0 into ``lf[3-4]-0``, which slurmctld refuses
    ("fatal: Invalid switches: lf[3-4]-0"). Then only names that differ in their trailing
    number are folded together; every other name is written out."""
    names = list(names)
    folded = _fold(names)
    if not _RANGE_INSIDE.search(folded):
        return folded
    by_prefix: dict[str, list[str]] = {}
    single: list[str] = []
    for name in names:
        m = _TRAILING_NUMBER.match(name)
        if m is None:
            single.append(name)
        else:
            by_prefix.setdefault(m.group(1), []).append(name)
    return ",".join(sorted([_fold(group) for group in by_prefix.values()] + single))


def gpu_devices(gpus: Gpus) -> str:
    """gres.conf File=: the spec's devices, else /dev/nvidia0.. one per GPU."""
    if gpus.devices:
        return gpus.devices
    return "/dev/nvidia0" if gpus.count == 1 else f"/dev/nvidia[0-{gpus.count - 1}]"


def _by_hardware(nodes: list[Node]) -> list[tuple[Hardware, list[str]]]:
    """Nodes with identical hardware, in spec order, so each gets one folded line."""
    out: dict[str, tuple[Hardware, list[str]]] = {}
    keys: dict[int, str] = {}  # the nodes of a group share one Hardware: dump it once
    for n in nodes:
        key = keys.get(id(n.hardware))
        if key is None:
            key = keys[id(n.hardware)] = n.hardware.model_dump_json()
        out.setdefault(key, (n.hardware, []))[1].append(n.name)
    return list(out.values())


# From this release on, a spec that does not choose gets configless Slurm.
CONFIGLESS_DEFAULT_FROM = "24.11"
# sackd, which serves configless configs (and auth) to login nodes, is new in 23.11.
SACKD_FROM = "23.11"


def config_delivery(cluster: Cluster) -> str:
    """``configless`` or ``files``: the spec's choice, else by the target release."""
    slurm = cluster.partitions.slurm
    assert slurm is not None
    if slurm.config_delivery is not None:
        return slurm.config_delivery
    return "configless" if version_at_least(cluster.cluster.versions.slurm, CONFIGLESS_DEFAULT_FROM) else "files"


def topology_format(cluster: Cluster, fabric: Fabric | None) -> str:
    slurm = cluster.partitions.slurm
    assert slurm is not None
    if fabric is None:
        return "none"
    if slurm.topology != "auto":
        return slurm.topology
    if fabric.block_sizes:
        return "yaml" if version_at_least(cluster.cluster.versions.slurm, "25.05") else "block"
    return "tree"


def _tree(fabric: Fabric, compute: set[str]) -> list[TopoSwitch]:
    """One line per switch, leaves first; switches with no Slurm node are left out."""
    lines: list[TopoSwitch] = []
    kept: set[str] = set()
    for level in ("su", "spine", "core"):
        for group in fabric.groups.get(level, ()):
            if level == "su":
                members = [n for n in group.nodes if n in compute]
                if members:
                    lines.append(TopoSwitch(group.name, fold(members), None))
                    kept.add(group.name)
            else:
                children = [c for c in group.children if c in kept]
                if children:
                    lines.append(TopoSwitch(group.name, None, fold(children)))
                    kept.add(group.name)
    return lines


def _blocks(fabric: Fabric, compute: set[str]) -> list[Block]:
    blocks = []
    for dom in fabric.groups.get("nvlink", ()):
        members = [n for n in dom.nodes if n in compute]
        if members:
            blocks.append(Block(dom.name, fold(members)))
    return blocks


def compile_slurm(cluster: Cluster, nodes: list[Node], fabric: Fabric | None) -> SlurmPlan | None:
    slurm = cluster.partitions.slurm
    if slurm is None:
        return None
    compute = [n for n in nodes if "slurm_compute" in n.roles]
    node_lines = []
    gres_lines = []
    for hw, names in _by_hardware(compute):
        hl = fold(names)
        gres = f"gpu:{hw.gpus.type}:{hw.gpus.count}" if hw.gpus else None
        node_lines.append(
            NodeLine(hl, hw.cpus, hw.sockets, hw.cores_per_socket, hw.threads_per_core, hw.memory_mb, gres)
        )
        if hw.gpus:
            gres_lines.append(GresLine(hl, hw.gpus.type, gpu_devices(hw.gpus), hw.gpus.count))

    fmt = topology_format(cluster, fabric)
    compute_set = {n.name for n in compute}
    switches = _tree(fabric, compute_set) if fabric and fmt in ("tree", "yaml") else []
    blocks = _blocks(fabric, compute_set) if fabric and fmt in ("block", "yaml") else []
    plugin = {"tree": "topology/tree", "block": "topology/block"}.get(fmt)
    version = cluster.cluster.versions.slurm
    delivery = config_delivery(cluster)
    return SlurmPlan(
        cluster_name=cluster.cluster.name,
        version=version,
        controllers=tuple(expand(slurm.controllers)),
        login=tuple(expand(slurm.login)) if slurm.login else (),
        compute=tuple(n.name for n in compute),
        nodes=tuple(node_lines),
        gres=tuple(gres_lines),
        partitions=tuple(
            PartitionLine(
                p.name,
                fold(expand(p.nodes)),
                p.default,
                p.max_time,
                p.default_time,
                p.def_cpu_per_gpu,
                p.def_mem_per_gpu_mb,
                p.topology,
                p.grace_time,
            )
            for p in slurm.partitions
        ),
        topology_plugin=plugin,
        topology_format=fmt,
        switches=tuple(switches),
        blocks=tuple(blocks),
        block_sizes=fabric.block_sizes if fabric and blocks else (),
        yaml_default=("nvlink" if blocks else "fabric") if fmt == "yaml" else None,
        settings=slurm,
        config_delivery=delivery,
        slurmctld_parameters=("enable_configless",) if delivery == "configless" else (),
    )

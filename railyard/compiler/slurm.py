"""Slurm: NodeName/PartitionName lines, GRES, and topology (tree, block or topology.yaml)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from railyard.compiler.fabric import Fabric
from railyard.compiler.nodes import Node
from railyard.errors import Problem
from railyard.hostlist import expand, refold
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
    qos: str | None = None  # partition QOS


@dataclass(frozen=True, slots=True)
class TopoSwitch:
    name: str
    nodes: str | None  # hostlist, for leaf-level switches
    switches: str | None  # hostlist of child switches


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    nodes: str


@dataclass(frozen=True, slots=True)
class PartialBlock:
    """A block with fewer Slurm nodes than the base block size."""

    name: str
    nodes: int
    path: str  # the spec path of its NVLink domain


@dataclass(frozen=True)
class BlockLayout:
    """topology/block as Slurm will read it: blocks SU by SU, and BlockSizes."""

    blocks: tuple[Block, ...] = ()
    sizes: tuple[int, ...] = ()
    per_su: tuple[tuple[str, int], ...] = ()  # (SU, its blocks), SUs that have any
    partial: tuple[PartialBlock, ...] = ()


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
    partial_blocks: tuple[PartialBlock, ...] = ()


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


def fold_hostlist(hostlist: str) -> str:
    """``fold(expand(hostlist))``: the names are written out only when Slurm could not read
    ClusterShell's folding of the text."""
    folded = refold(hostlist)
    if not _RANGE_INSIDE.search(folded):
        return folded
    return fold(expand(hostlist))


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


def topology_format(cluster: Cluster, fabric: Fabric | None, has_blocks: bool) -> str:
    """``has_blocks``: some NVLink domain holds a Slurm node (:func:`block_layout`)."""
    slurm = cluster.partitions.slurm
    assert slurm is not None
    if fabric is None:
        return "none"
    if slurm.topology != "auto":
        return slurm.topology
    if has_blocks:
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


# topology/block (src/plugins/topology/block/block_record.c, block_record_validate): the
# base blocks are taken in the order topology.conf lists them, and a BlockSizes level of
# 2^j base blocks joins blocks [k*2^j, (k+1)*2^j) of that order (the last one may be
# shorter); eval_nodes_block.c places a job in one such aggregate (``i / bblock_per_block``).
# So railyard lists the blocks SU by SU and keeps a level only where every SU boundary
# falls on a multiple of 2^j: then no aggregate spans two SUs, the groups Kueue and
# Volcano keep a job inside. (A job larger than the largest BlockSizes is placed across
# the whole topology, by Slurm's rule.)


def _su_misaligned(counts: list[int], level: int) -> int | None:
    """The first SU (index) after which an aggregate of 2^level blocks would go on into
    the next SU; None when every boundary is aligned. The last SU has no boundary after it."""
    step = 1 << level
    at = 0
    for i, count in enumerate(counts[:-1]):
        at += count
        if at % step:
            return i
    return None


def block_layout(cluster: Cluster, fabric: Fabric | None, compute: set[str]) -> tuple[BlockLayout, list[Problem]]:
    """The Slurm blocks (NVLink domains, only their Slurm compute nodes), SU by SU, and the
    BlockSizes: the spec's, checked, or the base block doubled while no aggregate spans SUs.

    The base block size is the most Slurm nodes one domain holds. A domain with fewer (a
    smaller domain, or spares and Kubernetes workers in it) is a partial block."""
    domains = fabric.groups.get("nvlink", ()) if fabric else ()
    if not domains or cluster.fabric is None:
        return BlockLayout(), []
    assert fabric is not None
    kind = "rail_optimized" if cluster.fabric.rail_optimized else "explicit"
    spec = (cluster.fabric.rail_optimized or cluster.fabric.explicit).nvlink  # type: ignore[union-attr]
    assert spec is not None
    base = f"fabric.{kind}.nvlink"
    sus = fabric.groups.get("su", ())
    su_of = {n: i for i, su in enumerate(sus) for n in su.nodes}
    by_su: dict[int, list[tuple[Block, int, str]]] = {}
    for d, dom in enumerate(domains):
        members = [n for n in dom.nodes if n in compute]
        if members and dom.nodes[0] in su_of:
            path = f"{base}.domains[{d}].nodes" if spec.domains is not None else f"{base}.domain_nodes"
            by_su.setdefault(su_of[dom.nodes[0]], []).append((Block(dom.name, fold(members)), len(members), path))
    if not by_su:
        return BlockLayout(), []
    ordered = [(sus[i].name, by_su[i]) for i in sorted(by_su)]
    counts = [len(blocks) for _su, blocks in ordered]
    bblock = max(k for _su, blocks in ordered for _b, k, _p in blocks)
    problems: list[Problem] = []
    path = f"{base}.block_sizes"
    if spec.block_sizes is None:
        sizes = [bblock]
        while (1 << len(sizes)) <= max(counts) and _su_misaligned(counts, len(sizes)) is None:
            sizes.append(bblock << len(sizes))
    else:
        sizes = list(spec.block_sizes)
        if sizes[0] != bblock:
            problems.append(Problem(
                path,
                f"the first block size is the base block: the Slurm nodes of one NVLink domain, {bblock} "
                f"here, not {sizes[0]} (spares and Kubernetes workers in a domain are not in its block); "
                f"Slurm joins whole blocks, so each later size is {bblock} times 2, 4, 8, ...",
            ))
        for a, b in itertools.pairwise(sizes):
            ratio = b // a if b % a == 0 else 0
            if ratio < 2 or ratio & (ratio - 1):
                problems.append(Problem(
                    path, f"{b} is not a power-of-two multiple of {a}; each block size is 2, 4, 8, ... times the one before"))
                break
        if not problems:
            for size in sizes[1:]:
                level = (size // bblock).bit_length() - 1
                i = _su_misaligned(counts, level)
                if i is not None:
                    fits = [s for s in sizes if _su_misaligned(counts, (s // bblock).bit_length() - 1) is None]
                    problems.append(Problem(
                        path,
                        f"BlockSizes {size} joins {1 << level} consecutive blocks, but SU {ordered[i][0]} ends "
                        f"after {sum(counts[: i + 1])} blocks, not on a multiple of {1 << level}, so such a block "
                        f"would span SUs {ordered[i][0]} and {ordered[i + 1][0]}, which Kueue and Volcano keep "
                        f"apart: keep the sizes to {', '.join(map(str, fits))}, or give every SU but the last "
                        f"a multiple of {1 << level} NVLink domains with Slurm nodes",
                    ))
                    break
    partial = tuple(PartialBlock(b.name, k, p) for _su, blocks in ordered for b, k, p in blocks if k < bblock)
    layout = BlockLayout(
        blocks=tuple(b for _su, blocks in ordered for b, _k, _p in blocks),
        sizes=tuple(sizes),
        per_su=tuple((su, len(blocks)) for su, blocks in ordered),
        partial=partial,
    )
    return layout, problems


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

    compute_set = {n.name for n in compute}
    layout, _problems = block_layout(cluster, fabric, compute_set)  # validate.check reported them
    fmt = topology_format(cluster, fabric, bool(layout.blocks))
    switches = _tree(fabric, compute_set) if fabric and fmt in ("tree", "yaml") else []
    blocks = layout.blocks if fmt in ("block", "yaml") else ()
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
                fold_hostlist(p.nodes),
                p.default,
                p.max_time,
                p.default_time,
                p.def_cpu_per_gpu,
                p.def_mem_per_gpu_mb,
                p.topology,
                p.grace_time,
                p.qos,
            )
            for p in slurm.partitions
        ),
        topology_plugin=plugin,
        topology_format=fmt,
        switches=tuple(switches),
        blocks=tuple(blocks),
        block_sizes=layout.sizes if blocks else (),
        yaml_default=("nvlink" if blocks else "fabric") if fmt == "yaml" else None,
        settings=slurm,
        config_delivery=delivery,
        slurmctld_parameters=("enable_configless",) if delivery == "configless" else (),
        partial_blocks=layout.partial if blocks else (),
    )

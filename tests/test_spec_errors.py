"""Bad specs: each gets a specific error that names the YAML path and the fix."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from railyard.errors import SpecError
from railyard.load import loads_plan


def group(spec: dict, name: str) -> dict:
    return next(g for g in spec["nodes"] if g["group"] == name)


def rail(spec: dict) -> dict:
    return spec["fabric"]["rail_optimized"]


def slurm(spec: dict) -> dict:
    return spec["partitions"]["slurm"]


def kueue(spec: dict) -> dict:
    return spec["partitions"]["kubernetes"]["kueue"]


def explicit_fabric(spec: dict, links: list[dict], spine: bool = True) -> None:
    switches = [{"name": "leaf-a", "tier": "leaf", "radix": 16}, {"name": "leaf-b", "tier": "leaf", "radix": 16}]
    if spine:
        switches.append({"name": "spine-a", "tier": "spine", "radix": 16})
    spec["fabric"] = {"link_speed": "400G", "explicit": {"switches": switches, "links": links}}
    for g in ("gpu", "kw"):
        group(spec, g)["hardware"]["nics"] = 1


def _cabled(spec: dict, extra: list[dict], spine: bool = True) -> None:
    nodes = ["gpu001", "gpu002", "kw1"], ["gpu003", "gpu004", "kw2"]
    links = [{"a": n, "b": "leaf-a"} for n in nodes[0]] + [{"a": n, "b": "leaf-b"} for n in nodes[1]]
    explicit_fabric(spec, links + extra, spine)


def _three_tier(spec: dict, leaves=(None, None), spine=None, core=None, domains=None, extra=()) -> None:
    """An explicit leaf/spine/core fabric over the lab's SUs, with the group names given
    (None: no group, the smallest switch name names it) and optional NVLink domains."""
    switches = [
        {"name": "leaf-a", "tier": "leaf", "radix": 16, "group": leaves[0]},
        {"name": "leaf-b", "tier": "leaf", "radix": 16, "group": leaves[1]},
        {"name": "spine-a", "tier": "spine", "radix": 16, "group": spine},
        {"name": "core-a", "tier": "core", "radix": 16, "group": core},
    ]
    _cabled(spec, [{"a": "leaf-a", "b": "spine-a"}, {"a": "leaf-b", "b": "spine-a"},
                   {"a": "spine-a", "b": "core-a"}, *extra])
    spec["fabric"]["explicit"]["switches"] = [{k: v for k, v in sw.items() if v} for sw in switches]
    if domains:
        spec["fabric"]["explicit"]["nvlink"] = {"domains": [
            {"name": domains[0], "nodes": "gpu[001-002],kw1"}, {"name": domains[1], "nodes": "gpu[003-004],kw2"}]}
        spec["cluster"]["versions"]["slurm"] = "24.11"


def _su_named(name: str, core: bool = False, nvlink: bool = False) -> Callable[[dict], None]:
    def apply(spec: dict) -> None:
        rail(spec)["scalable_units"][1]["name"] = name
        if core:
            rail(spec).update(core={"count": 1, "sus_per_group": 1}, leaf_radix=16)
            rail(spec)["spines"]["radix"] = 16
        if nvlink:
            rail(spec)["nvlink"] = {"domain_nodes": 3}
            spec["cluster"]["versions"]["slurm"] = "24.11"

    return apply


def _bridged_unnamed(spec: dict) -> None:
    """Two rails per SU, no group names; gpu002's rail 1 is cabled to the other SU's leaf."""
    nodes = {"a": ["gpu001", "gpu002", "kw1"], "b": ["gpu003", "gpu004", "kw2"]}
    switches = [{"name": f"lf{g}-{r}", "tier": "leaf", "radix": 8} for g in "ab" for r in (0, 1)]
    switches.append({"name": "spine1", "tier": "spine", "radix": 8})
    links = [{"a": n, "b": f"lf{g}-{r}"} for g in "ab" for r in (0, 1) for n in nodes[g]]
    links[links.index({"a": "gpu002", "b": "lfa-1"})] = {"a": "gpu002", "b": "lfb-1"}  # links[4]
    links += [{"a": f"lf{g}-{r}", "b": "spine1"} for g in "ab" for r in (0, 1)]
    spec["fabric"] = {"link_speed": "400G", "explicit": {"switches": switches, "links": links}}


def _dual_homed(spec: dict) -> None:
    """One rail; gpu001 has a second NIC, cabled to the other SU's leaf."""
    _cabled(spec, [{"a": "leaf-a", "b": "spine-a"}, {"a": "leaf-b", "b": "spine-a"}, {"a": "gpu001", "b": "leaf-b"}])
    group(spec, "gpu")["hardware"]["nics"] = 2  # gpu002..4 now miss a NIC: reported apart


def _su_across_unnamed_planes(spec: dict) -> None:
    """leaf-b reaches a spine of each of two planes that share no SU otherwise."""
    _cabled(spec, [{"a": "leaf-a", "b": "spine-a"}, {"a": "leaf-c", "b": "spine-b"},
                   {"a": "leaf-b", "b": "spine-a"}, {"a": "leaf-b", "b": "spine-b"},
                   {"a": "spine-a", "b": "core-a"}, {"a": "spine-b", "b": "core-a"}])
    spec["fabric"]["explicit"]["switches"] += [
        {"name": "leaf-c", "tier": "leaf", "radix": 16}, {"name": "spine-b", "tier": "spine", "radix": 16},
        {"name": "core-a", "tier": "core", "radix": 16}]
    links = spec["fabric"]["explicit"]["links"]
    for n in ("gpu003", "kw2"):  # leaf-c takes two nodes from leaf-b
        links[links.index({"a": n, "b": "leaf-b"})] = {"a": n, "b": "leaf-c"}


def _generated_nvlink(**names) -> Callable[[dict], None]:
    """An explicit fabric whose NVLink domains railyard names (domain_nodes: nvl1, nvl2)."""
    def apply(spec: dict) -> None:
        _three_tier(spec, **names)
        spec["fabric"]["explicit"]["nvlink"] = {"domain_nodes": 3}
        spec["cluster"]["versions"]["slurm"] = "24.11"

    return apply


def _two_pods_named(name: str) -> Callable[[dict], None]:
    """Two pods (one spine each, one SU each) under one core, both given one group name."""
    def apply(spec: dict) -> None:
        _three_tier(spec)
        ex = spec["fabric"]["explicit"]
        ex["links"].remove({"a": "leaf-b", "b": "spine-a"})
        ex["switches"].append({"name": "spine-b", "tier": "spine", "radix": 16})
        ex["links"] += [{"a": "leaf-b", "b": "spine-b"}, {"a": "spine-b", "b": "core-a"}]
        ex["switches"][2]["group"] = ex["switches"][4]["group"] = name

    return apply


def _ha_control_plane(count: int) -> Callable[[dict], None]:
    def mutate(spec: dict) -> None:
        group(spec, "kcp")["names"] = f"kcp[1-{count}]"
        spec["partitions"]["kubernetes"]["control_plane"] = f"kcp[1-{count}]"
    return mutate


def _two_spine_groups(spec: dict) -> None:
    """leaf-b is cabled to spines of two groups: the groups would be merged."""
    _cabled(spec, [{"a": "leaf-a", "b": "spine-a"}, {"a": "leaf-b", "b": "spine-a"}, {"a": "leaf-b", "b": "spine-b"}])
    spec["fabric"]["explicit"]["switches"][2]["group"] = "plane-a"
    spec["fabric"]["explicit"]["switches"].append({"name": "spine-b", "tier": "spine", "radix": 16, "group": "plane-b"})


SW = "fabric.explicit.switches"
DOM = "fabric.explicit.nvlink.domains"
# Group names are one namespace (Slurm switches/blocks, Volcano HyperNodes): every pair of
# levels, user-chosen against user-chosen and against the names railyard makes up (spine,
# pod<n>, core, nvl<n>; an unnamed explicit group takes its smallest switch's name, which
# the user chose). Slurm's aggregated blocks are named by a hostlist of their blocks
# ("nvl[1-2]", block_record.c), which no DNS-label group name can equal.
NAME_CLASHES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("name-su-vs-spine", lambda s: _three_tier(s, ("x", None), spine="x"), f"{SW}[2].group",
     f"'x' names both the SU at {SW}[0].group and the spine group at {SW}[2].group"),
    ("name-su-vs-core", lambda s: _three_tier(s, ("x", None), core="x"), f"{SW}[3].group",
     f"'x' names both the SU at {SW}[0].group and the core group at {SW}[3].group"),
    ("name-su-vs-nvlink", lambda s: _three_tier(s, ("x", None), domains=("x", "d2")), f"{DOM}[0].name",
     f"'x' names both the SU at {SW}[0].group and the NVLink domain at {DOM}[0].name"),
    ("name-spine-vs-core", lambda s: _three_tier(s, spine="x", core="x"), f"{SW}[3].group",
     f"'x' names both the spine group at {SW}[2].group and the core group at {SW}[3].group"),
    ("name-spine-vs-nvlink", lambda s: _three_tier(s, spine="x", domains=("d1", "x")), f"{DOM}[1].name",
     f"'x' names both the spine group at {SW}[2].group and the NVLink domain at {DOM}[1].name"),
    ("name-core-vs-nvlink", lambda s: _three_tier(s, core="x", domains=("x", "d2")), f"{DOM}[0].name",
     f"'x' names both the core group at {SW}[3].group and the NVLink domain at {DOM}[0].name"),
    ("name-su-vs-su", lambda s: _three_tier(s, ("x", "x")), f"{SW}[1].group",
     f"'x' names both the SU at {SW}[0].group and the SU at {SW}[1].group"),
    ("name-nvlink-vs-nvlink", lambda s: _three_tier(s, domains=("x", "x")), f"{DOM}[1].name",
     f"'x' names both the NVLink domain at {DOM}[0].name and the NVLink domain at {DOM}[1].name"),
    ("name-spine-vs-unnamed-su", lambda s: _three_tier(s, spine="leaf-a"), f"{SW}[2].group",
     f"'leaf-a' names both the SU at {SW}[0].name and the spine group at {SW}[2].group"),
    ("name-su-vs-generated-spine", _su_named("spine"), "fabric.rail_optimized.scalable_units[1].name",
     "'spine' names both the SU at fabric.rail_optimized.scalable_units[1].name and the spine group railyard names 'spine'"),
    ("name-su-vs-generated-pod", _su_named("pod1", core=True), "fabric.rail_optimized.scalable_units[1].name",
     "and the spine group railyard names 'pod1'; every SU, spine group, pod, core group and NVLink domain"),
    ("name-su-vs-generated-core", _su_named("core", core=True), "fabric.rail_optimized.scalable_units[1].name",
     "and the core group railyard names 'core'"),
    ("name-su-vs-generated-nvlink", _su_named("nvl1", nvlink=True), "fabric.rail_optimized.scalable_units[1].name",
     "and the NVLink domain railyard names 'nvl1'"),
    ("name-su-vs-generated-nvlink-explicit", _generated_nvlink(leaves=("nvl1", None)), f"{SW}[0].group",
     f"'nvl1' names both the SU at {SW}[0].group and the NVLink domain railyard names 'nvl1'"),
    ("name-spine-vs-generated-nvlink", _generated_nvlink(spine="nvl2"), f"{SW}[2].group",
     f"'nvl2' names both the spine group at {SW}[2].group and the NVLink domain railyard names 'nvl2'"),
    ("name-core-vs-generated-nvlink", _generated_nvlink(core="nvl1"), f"{SW}[3].group",
     f"'nvl1' names both the core group at {SW}[3].group and the NVLink domain railyard names 'nvl1'"),
    ("name-unnamed-spine-vs-nvlink", lambda s: _three_tier(s, domains=("spine-a", "d2")), f"{DOM}[0].name",
     f"'spine-a' names both the spine group at {SW}[2].name and the NVLink domain at {DOM}[0].name"),
    ("name-su-vs-unnamed-core", lambda s: _three_tier(s, ("core-a", None)), f"{SW}[3].name",
     f"'core-a' names both the SU at {SW}[0].group and the core group at {SW}[3].name"),
    ("name-spine-vs-spine", _two_pods_named("x"), f"{SW}[4].group",
     f"'x' names both the spine group at {SW}[2].group and the spine group at {SW}[4].group"),
    ("name-su-twice", _su_named("su1"), "fabric.rail_optimized.scalable_units[1].name",
     "SU name 'su1' is already used by scalable_units[0]; give every SU its own name"),
    ("node-under-two-leaf-groups", lambda s: _three_tier(s, ("rack-a", "rack-b"), extra=[{"a": "gpu001", "b": "leaf-b"}]),
     f"{SW}[1].group", ("leaf switches leaf-a (group 'rack-a') and leaf-b (group 'rack-b') are one SU: "
                        "node gpu001 is cabled to both; a node sits under exactly one SU")),
    ("node-bridges-two-unnamed-sus", _bridged_unnamed, "fabric.explicit.links[4]",
     ("node gpu002 is cabled to leaf switches of 2 groups: lfa-0 (with gpu001, kw1) and lfb-1 (with gpu003, gpu004, "
     "kw2); the cabling would merge them into one SU, but a node sits under exactly one SU: cable gpu002 to leaf "
     "switches of one group only, or, if these switches are one SU, give all of them one group name")),
    ("dual-homed-node-bridges-two-sus", _dual_homed, "fabric.explicit.links[8]",
     ("node gpu001 is cabled to leaf switches of 2 groups: leaf-a (with gpu002, kw1) and leaf-b (with gpu003, "
     "gpu004, kw2)")),
    ("su-bridges-two-unnamed-spine-groups", _su_across_unnamed_planes, "fabric.explicit.links[9]",
     ("SU leaf-b is cabled to spine switches of 2 groups: spine-a (with leaf-a) and spine-b (with leaf-c); the "
     "cabling would merge them into one spine group, but an SU sits under exactly one spine group")),
    ("su-under-two-spine-groups", _two_spine_groups, f"{SW}[3].group",
     "spine switches spine-a (group 'plane-a') and spine-b (group 'plane-b') are one spine group: SU leaf-b is cabled to both"),
    ("nvlink-domain-off-fabric", lambda s: (_three_tier(s, domains=("d1", "d2")),
                                            s["fabric"]["explicit"]["nvlink"]["domains"][0].update(nodes="gpu[001-002],kw1,ctl1")),
     f"{DOM}[0].nodes", "ctl1 of NVLink domain d1 are on no fabric leaf"),
    ("nvlink-domains-leave-nodes-out", lambda s: (_three_tier(s, domains=("d1", "d2")),
                                                  s["fabric"]["explicit"]["nvlink"]["domains"].pop()),
     "fabric.explicit.nvlink.domains", "gpu003, gpu004, kw2 are on the fabric but in no NVLink domain"),
]


def _pod_network(**fields) -> Callable[[dict], None]:
    return lambda spec: spec["partitions"]["kubernetes"].setdefault("network", {}).update(fields)


def _set(path: str, value) -> Callable[[dict], None]:
    def apply(spec: dict) -> None:
        keys = path.split(".")
        target = spec
        for k in keys[:-1]:
            target = target[int(k)] if k.isdigit() else target[k]
        target[keys[-1]] = value

    return apply


# (id, mutation, expected path, expected message fragment)
CASES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("unknown-top-level-key", lambda s: s.update(clutser={}), "clutser", "did you mean 'cluster'"),
    ("unknown-nested-key", lambda s: group(s, "gpu")["hardware"].update(gpu=1), "nodes[2].hardware.gpu", "did you mean 'gpus'"),
    ("missing-required-key", lambda s: s["cluster"].pop("name"), "cluster.name", "required key 'name' is missing"),
    ("bad-slurm-version", _set("cluster.versions.slurm", "21.08"), "cluster.versions.slurm", "'21.08' is not allowed"),
    ("bad-cluster-name", _set("cluster.name", "Lab-Cluster"), "cluster.name", "does not match"),
    ("duplicate-hostname", lambda s: s["nodes"].append({"group": "extra", "names": "gpu001", "hardware": group(s, "ctl")["hardware"]}),
     "nodes[6].names", "hostname 'gpu001' is also in nodes[2]"),
    ("duplicate-group-name", lambda s: s["nodes"].append({"group": "gpu", "names": "spare1", "hardware": group(s, "ctl")["hardware"]}),
     "nodes[6].group", "group name 'gpu' is already used"),
    ("duplicate-address", lambda s: group(s, "gpu").update(addresses={"gpu001": "10.77.0.50", "gpu002": "10.77.0.50"}),
     "nodes[2].addresses.gpu002", "10.77.0.50 is already the address of gpu001"),
    ("address-outside-cidr", lambda s: group(s, "gpu").update(addresses={"gpu001": "10.78.0.5"}),
     "nodes[2].addresses.gpu001", "outside the management network 10.77.0.0/24"),
    ("address-override-unknown-node", lambda s: group(s, "gpu").update(addresses={"gpu009": "10.77.0.60"}),
     "nodes[2].addresses.gpu009", "'gpu009' is not a node of group 'gpu'"),
    ("cidr-exhausted", _set("network.management.cidr", "10.77.0.0/28"), "network.management.cidr", "has no address left"),
    ("node-in-two-partitions", _set("partitions.slurm.partitions.0.nodes", "gpu[001-004],kw1"), "nodes[4]", "is in two partitions"),
    ("node-in-no-partition", lambda s: s["nodes"].append({"group": "spare", "names": "spare1", "hardware": group(s, "ctl")["hardware"]}),
     "nodes[6]", "node spare1 is in no partition"),
    ("unknown-node-in-partition", _set("partitions.slurm.partitions.0.nodes", "gpu[001-005]"),
     "partitions.slurm.partitions[0].nodes", "gpu005 is not a node of this spec"),
    ("bad-hostlist", _set("partitions.slurm.partitions.0.nodes", "gpu[001-"), "partitions.slurm.partitions[0].nodes", "not a valid hostlist"),
    ("pattern-without-index", lambda s: group(s, "gpu").update(pattern="gpu"), "nodes[2].pattern", "is not a name with one {index} field"),
    ("names-and-pattern", lambda s: group(s, "gpu").update(names="gpu[001-004]"), "nodes[2]", "either 'names' or 'pattern'"),
    ("leaf-ports-exhausted", lambda s: rail(s).update(leaf_radix=4), "fabric.rail_optimized.leaf_radix",
     "leaf su1-rail0 (and 3 more like it) needs 5 ports (3 down, 2 up) but has 4"),
    ("spine-ports-exhausted", lambda s: rail(s)["spines"].update(radix=3), "fabric.rail_optimized.spines.radix",
     "spine spine1 (and 1 more like it) needs 4 ports"),
    ("rails-not-nics", lambda s: rail(s).update(rails=4, leaf_radix=16), "nodes[2].hardware.nics",
     "gpu001 has 2 fabric NICs but the fabric has 4 rails"),
    ("node-in-two-sus", lambda s: rail(s)["scalable_units"][1].update(nodes="gpu[003-004],kw2,gpu001"),
     "fabric.rail_optimized.scalable_units[1].nodes", "gpu001 is in SU su1 and SU su2"),
    ("compute-node-off-fabric", lambda s: rail(s)["scalable_units"][1].update(nodes="gpu003,kw2"),
     "nodes[2]", "gpu004 are under no fabric switch"),
    ("nvlink-does-not-tile", lambda s: (rail(s).update(nvlink={"domain_nodes": 2}), s["cluster"]["versions"].update(slurm="24.11")),
     "fabric.rail_optimized.nvlink.domain_nodes", "NVLink domains of 2 nodes do not tile SU su1 (3 nodes)"),
    ("block-on-22.05", lambda s: (rail(s).update(nvlink={"domain_nodes": 3}), s["cluster"]["versions"].update(slurm="22.05")),
     "cluster.versions.slurm",
     "topology/block (NVLink domains) needs Slurm 24.05 or later, but the target is 22.05"),
    ("block-without-nvlink", lambda s: (slurm(s).update(topology="block"), s["cluster"]["versions"].update(slurm="24.11")),
     "partitions.slurm.topology", "topology 'block' needs NVLink domains"),
    ("block-sizes-not-power-of-two", lambda s: (rail(s).update(nvlink={"domain_nodes": 3, "block_sizes": [3, 9]}),
                                                s["cluster"]["versions"].update(slurm="24.11")),
     "fabric.rail_optimized.nvlink.block_sizes", "9 is not a power-of-two multiple of 3"),
    ("yaml-topology-on-24.11", lambda s: (slurm(s).update(topology="yaml"), s["cluster"]["versions"].update(slurm="24.11")),
     "partitions.slurm.topology", "topology.yaml needs Slurm 25.05 or later"),
    ("partition-topology-without-yaml", _set("partitions.slurm.partitions.0.topology", "fabric"),
     "partitions.slurm.partitions[0].topology", "needs topology.yaml"),
    ("two-default-partitions", lambda s: slurm(s)["partitions"].append({"name": "debug", "nodes": "gpu001", "default": True}),
     "partitions.slurm.partitions", "are all default"),
    ("bad-slurm-time", _set("partitions.slurm.partitions.0.max_time", "forever"), "partitions.slurm.partitions[0].max_time",
     "'forever' is not a Slurm time"),
    ("too-many-cpus-per-gpu", _set("partitions.slurm.partitions.0.def_cpu_per_gpu", 2), "partitions.slurm.partitions[0].def_cpu_per_gpu",
     "2 CPUs per GPU x 2 GPUs exceeds the 2 CPUs of gpu001"),
    ("autodetect-nvidia-on-22.05", lambda s: (_set("partitions.slurm.gres_autodetect", "nvidia")(s),
                                            s["cluster"]["versions"].update(slurm="22.05")),
     "partitions.slurm.gres_autodetect",
     "AutoDetect=nvidia needs Slurm 24.11+"),
    ("pyxis-without-enroot", lambda s: slurm(s)["enroot"].update(enabled=False), "partitions.slurm.enroot.enabled",
     "Pyxis is enabled (partitions.slurm.pyxis.enabled) but Enroot is not"),
    ("pyxis-without-package", lambda s: slurm(s)["pyxis"].pop("package"), "partitions.slurm.pyxis.package", "has no package source"),
    ("package-two-sources", lambda s: slurm(s)["enroot"].update(package={"url": "https://x/e.deb", "apt": "enroot"}),
     "partitions.slurm.enroot.package", "exactly one of 'url', 'path' or 'apt'"),
    ("plain-text-secret", lambda s: slurm(s).update(accounting={"host": "ctl1", "storage_host": "ctl1", "storage_password": "hunter2"}),
     "partitions.slurm.accounting.storage_password", "looks like a plain-text secret"),
    ("plain-text-bmc-password", lambda s: group(s, "gpu").update(provision={"driver": "redfish", "bmc": {
        "address": "https://{name}-bmc", "username": "admin", "password": "calvin"}}),
     "nodes[2].provision.bmc.password", "looks like a plain-text secret"),
    ("redfish-without-bmc", lambda s: group(s, "gpu").update(provision={"driver": "redfish"}), "nodes[2].provision",
     "driver 'redfish' needs a 'bmc' block"),
    ("kueue-quota-above-capacity", lambda s: kueue(s)["cluster_queues"][0].update(quotas={"standin": {"gpu": 100}}),
     "partitions.kubernetes.kueue.cluster_queues[0].quotas.standin.gpu", "quota 100 is more than the partition has (4 gpu"),
    ("kueue-quotas-sum-above-capacity", lambda s: kueue(s)["cluster_queues"].extend([
        {"name": "a", "quotas": {"standin": {"gpu": 3}}}, {"name": "b", "quotas": {"standin": {"gpu": 3}}}]),
     "partitions.kubernetes.kueue.cluster_queues", "nominal gpu quotas on 'standin' add up to 6 but the workers have 4"),
    ("kueue-quota-unknown-flavor", lambda s: kueue(s)["cluster_queues"][0].update(quotas={"a100": {"gpu": 1}}),
     "partitions.kubernetes.kueue.cluster_queues[0].quotas.a100", "no workers of flavor 'a100'"),
    ("local-queue-unknown-cluster-queue", lambda s: kueue(s)["local_queues"][0].update(cluster_queue="nope"),
     "partitions.kubernetes.kueue.local_queues[0].cluster_queue", "no cluster queue named 'nope'"),
    ("cluster-queue-unknown-cohort", lambda s: kueue(s)["cluster_queues"][0].update(cohort="nope"),
     "partitions.kubernetes.kueue.cluster_queues[0].cohort", "no cohort named 'nope'"),
    ("kueue-too-old", _set("cluster.versions.kueue", "0.14.0"), "cluster.versions.kueue", "served from Kueue 0.15"),
    # what scripts/build-k8s.sh builds here: Kueue 0.17.1, Volcano 1.14.1, Kubernetes 1.35.4
    ("kueue-not-installable", _set("cluster.versions.kueue", "0.19.2"), "cluster.versions.kueue",
     ('Kueue 0.19.2 cannot be installed: railyard installs Kueue 0.17.1, the release scripts/build-k8s.sh builds '
     '(railyard/builds.py); set cluster.versions.kueue: "0.17.1"')),
    ("volcano-not-installable", _set("cluster.versions.volcano", "1.15.1"), "cluster.versions.volcano",
     'Volcano 1.15.1 cannot be installed: railyard installs Volcano 1.14.1'),
    ("lab-kubernetes-not-built", _set("cluster.versions.kubernetes", "1.34"), "cluster.versions.kubernetes",
     'Kubernetes 1.34 cannot be installed: the lab runs Kubernetes 1.35,'),
    ("overlapping-mount-points", _set("storage.lustre.mount_point", "/shared/lustre"), "storage.lustre.mount_point",
     "mount point /shared/lustre overlaps /shared"),
    ("nfs-mount-not-exported", _set("storage.nfs.mounts.0.export", "/export/nowhere"), "storage.nfs.mounts[0].export",
     "'/export/nowhere' is not exported"),
    ("lustre-nid-on-unconfigured-lnet", _set("storage.lustre.mgs", [["10.0.0.1@o2ib0"]]), "storage.lustre.mgs[0]",
     "NID 10.0.0.1@o2ib0 is on LNet 'o2ib0', which storage.lustre.networks does not configure"),
    ("two-fabric-kinds", lambda s: s["fabric"].update(explicit={"switches": [], "links": []}), "fabric",
     "exactly one of 'rail_optimized' or 'explicit'"),
    ("explicit-link-skips-tier", lambda s: _cabled(s, [{"a": "gpu001", "b": "spine-a"}]), "fabric.explicit.links[6]",
     "skips or repeats a tier"),
    ("explicit-fabric-falls-apart", lambda s: _cabled(s, [], spine=False), "fabric.explicit",
     "the fabric falls apart into 2 parts at the top (leaf-a, leaf-b)"),
    ("explicit-uncabled-spine", lambda s: _cabled(s, []), "fabric.explicit", "spine switches of spine-a reach no node"),
    ("explicit-leaf-without-uplink", lambda s: _cabled(s, [{"a": "leaf-a", "b": "spine-a"}]), "fabric.explicit",
     "su groups leaf-b reach no spine switch"),
    ("explicit-unknown-endpoint", lambda s: _cabled(s, [{"a": "leaf-a", "b": "spine-x"}]), "fabric.explicit.links[6]",
     "'spine-x' is neither a node nor a switch"),
    # the pod network (partitions.kubernetes.network; the lab's management network is 10.77.0.0/24)
    ("pod-cidr-over-management", _pod_network(pod_cidr="10.77.0.0/16"), "partitions.kubernetes.network.pod_cidr",
     "10.77.0.0/16 overlaps the management network (10.77.0.0/24)"),
    ("service-cidr-in-pod-cidr", _pod_network(service_cidr="10.244.16.0/20"), "partitions.kubernetes.network.pod_cidr",
     "10.244.0.0/16 overlaps service_cidr (10.244.16.0/20)"),
    ("service-cidr-too-wide", _pod_network(service_cidr="10.0.0.0/8"), "partitions.kubernetes.network.service_cidr",
     "10.0.0.0/8 is wider than the apiserver accepts (at most a /12"),
    ("service-cidr-no-dns-address", _pod_network(service_cidr="10.96.0.0/29"), "partitions.kubernetes.network.service_cidr",
     "the cluster DNS is the tenth: use a /28 or wider"),
    ("node-block-not-narrower", _pod_network(pod_cidr="10.244.0.0/24", node_prefix=24),
     "partitions.kubernetes.network.node_prefix", "each worker's block (/24) must be narrower than pod_cidr 10.244.0.0/24"),
    ("node-block-too-small-for-110-pods", _pod_network(node_prefix=26), "partitions.kubernetes.network.node_prefix",
     "less than or equal to 25"),
    # KWOK is a per-group choice for simulating Kubernetes workers; a group with none has nothing to simulate
    ("kwok-on-a-group-without-workers", lambda s: group(s, "gpu").update(agent="kwok"), "nodes[2].agent",
     ("group 'gpu' sets agent: kwok (a simulated kubelet), but none of its nodes is a Kubernetes worker "
     "(partitions.kubernetes.workers), so nothing would run it; remove 'agent' from the group, or add its "
     "nodes to partitions.kubernetes.workers")),
    ("unknown-agent", lambda s: group(s, "kw").update(agent="containerd"), "nodes[4].agent", "'kubelet' or 'kwok'"),
    ("release-url-with-query", _set("partitions.kubernetes.release_url", "https://mirror.example.com/k8s?v=1"),
     "partitions.kubernetes.release_url", "has a query or fragment"),
    ("release-url-not-http", _set("partitions.kubernetes.release_url", "ftp://mirror.example.com/k8s"),
     "partitions.kubernetes.release_url", "is not an http(s) URL with a host"),
    # one etcd member per control-plane node: an odd count, at most 7
    ("two-control-plane-nodes", _ha_control_plane(2), "partitions.kubernetes.control_plane",
     ("2 control-plane nodes make 2 etcd members: an even count tolerates no more failures than one node fewer; "
      "name 1, 3, 5 or 7 nodes")),
    ("nine-control-plane-nodes", _ha_control_plane(9), "partitions.kubernetes.control_plane",
     "etcd recommends at most 7 members"),
    *NAME_CLASHES,
]


@pytest.mark.parametrize(("mutate", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_names_path_and_fix(lab, mutate, path, fragment):
    mutate(lab)
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(lab, sort_keys=False), "bad.yaml")
    problems = info.value.problems
    matching = [p for p in problems if p.path == path and fragment in p.message]
    assert matching, f"expected {path}: ...{fragment}... in:\n{info.value}"
    assert all(p.line for p in matching), f"no line number in {matching}"


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30


def test_missing_top_level_keys_are_reported_not_hung():
    with pytest.raises(SpecError) as info:
        loads_plan("cluster: {name: x, domain: x.example.com}\n", "short.yaml")
    paths = {p.path for p in info.value.problems}
    assert {"network", "nodes", "partitions"} <= paths


def test_malformed_yaml_reports_line():
    text = "cluster:\n  name: lab\n  domain: [unclosed\nnodes: []\n"
    with pytest.raises(SpecError) as info:
        loads_plan(text, "broken.yaml")
    (problem,) = info.value.problems
    assert problem.path == "<yaml>"
    assert "not valid YAML" in problem.message
    assert problem.line == 4


def test_every_problem_is_reported_at_once(lab):
    lab["clutser"] = {}
    group(lab, "gpu")["addresses"] = {"gpu001": "192.168.0.1"}
    slurm(lab)["partitions"][0]["max_time"] = "forever"
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(lab), "bad.yaml")
    # Structural errors come first (pydantic); all of them in one report.
    paths = {p.path for p in info.value.problems}
    assert {"clutser", "partitions.slurm.partitions[0].max_time"} <= paths
    assert "nothing was applied" in str(info.value)


def test_error_line_points_at_the_key():
    from tests.conftest import LAB

    text = LAB.read_text().replace("rails: 2", "rails: 3")
    with pytest.raises(SpecError) as info:
        loads_plan(text, "lab.yaml")
    problem = next(p for p in info.value.problems if p.path == "nodes[2].hardware.nics")
    lines = text.splitlines()
    assert "nics: 2" in lines[problem.line - 1]


def test_a_pod_network_too_small_for_the_workers_names_both_counts():
    """dgx-h100's Kubernetes workers (the spec's hostlist, dgx[097-128]: 32) need 32 blocks;
    a /20 holds 16 of /24."""
    from tests.conftest import ROOT

    spec = yaml.safe_load((ROOT / "inventories/dgx-h100/cluster.yaml").read_text())
    assert spec["partitions"]["kubernetes"]["workers"] == "dgx[097-128]"
    spec["partitions"]["kubernetes"]["network"] = {"pod_cidr": "10.244.0.0/20"}
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(spec, sort_keys=False), "small.yaml")
    (problem,) = [p for p in info.value.problems if p.path == "partitions.kubernetes.network.pod_cidr"]
    assert "10.244.0.0/20 holds 16 blocks of /24 but the partition has 32 workers" in problem.message
    spec["partitions"]["kubernetes"]["network"] = {"pod_cidr": "10.244.0.0/19"}  # 32 blocks: fits exactly
    loads_plan(yaml.safe_dump(spec, sort_keys=False), "fits.yaml")

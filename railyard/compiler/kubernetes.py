"""Kubernetes: node labels per fabric level, Kueue objects (v1beta2), Volcano queues and HyperNodes,
and the spec's priority classes for both (Kueue WorkloadPriorityClasses, Kubernetes PriorityClasses).

The levels are the fabric's, the same groups Slurm's topology.conf names, so a job that
asks Kueue or Volcano for "one SU" and one that asks Slurm for ``--switches=1`` get the
same set of nodes to choose from.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from railyard.compiler.fabric import Fabric
from railyard.compiler.nodes import Node
from railyard.spec import Cluster, version_at_least

GPU_RESOURCE = "nvidia.com/gpu"
# Pods a Node admits: the kubelet's default maxPods, which KWOK's simulated Nodes report too.
MAX_PODS = 110
GPU_LABEL = "railyard.dev/gpu"
PARTITION_LABEL = "railyard.dev/partition"
HOSTNAME_LABEL = "kubernetes.io/hostname"
TOPOLOGY_NAME = "fabric"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
HYPERNODE_API = "topology.volcano.sh/v1alpha1"
# HyperNode tiers count from the bottom: the finest level the schedulers see is tier 1.
VOLCANO_LEVELS = ("nvlink", "su", "spine", "core")


@dataclass(frozen=True)
class KubernetesPlan:
    control_plane: tuple[str, ...]
    workers: tuple[str, ...]
    label_keys: tuple[str, ...]  # fabric levels, top to bottom, then hostname
    labels: dict[str, dict[str, str]]  # node -> labels
    capacity: dict[str, dict[str, str]]  # node -> Node .status.capacity (node_capacity)
    # node -> what runs its pods: "kubelet" (real) or "kwok" (simulated), its group's agent
    agents: dict[str, str]
    kueue: tuple[dict[str, Any], ...]
    volcano: tuple[dict[str, Any], ...]
    volcano_scheduler_conf: dict[str, Any]
    network: PodAddresses


@dataclass(frozen=True)
class PodAddresses:
    """Where pods and Services live (spec partitions.kubernetes.network)."""

    pod_cidr: str  # the whole partition's
    pod_cidrs: dict[str, str]  # worker -> its block: the Node's podCIDR, its CNI bridge's subnet
    service_cidr: str
    cluster_dns: str  # the kube-dns Service's ClusterIP: the tenth address of service_cidr
    dns_domain: str


def pod_addresses(cluster: Cluster, workers: list[Node]) -> PodAddresses:
    """One block of pod_cidr per worker, in the partition's worker order (validate has
    checked there are enough)."""
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    net = k8s.network
    blocks = net.pod_cidr.subnets(new_prefix=net.node_prefix)
    return PodAddresses(
        pod_cidr=str(net.pod_cidr),
        pod_cidrs={n.name: str(block) for n, block in zip(workers, blocks, strict=False)},
        service_cidr=str(net.service_cidr),
        cluster_dns=str(net.service_cidr.network_address + 10),
        dns_domain=net.dns_domain,
    )


def flavor_of(node: Node) -> str:
    return node.hardware.gpus.type if node.hardware.gpus else "cpu"


def flavor_capacity(workers: list[Node]) -> dict[str, dict[str, int]]:
    """What the workers of each flavor have in all: cpu, memory_mb, gpu."""
    cap: dict[str, dict[str, int]] = defaultdict(lambda: {"cpu": 0, "memory_mb": 0, "gpu": 0})
    for n in workers:
        c = cap[flavor_of(n)]
        c["cpu"] += n.hardware.cpus
        c["memory_mb"] += n.hardware.memory_mb
        c["gpu"] += n.hardware.gpus.count if n.hardware.gpus else 0
    return dict(cap)


def node_capacity(node: Node) -> dict[str, str]:
    """What a worker's Node reports in ``.status.capacity``, from the spec's hardware: the
    quantities in the form the apiserver writes back, so a read compares equal.

    A simulated (KWOK) Node gets all of it from roles/k8s_worker. A kubelet measures CPUs,
    memory and pods itself, and the role sets only the extended resources (``nvidia.com/gpu``,
    as a device plugin would advertise them); drift compares both (railyard.drift.compare).
    """
    cap = {"cpu": str(node.hardware.cpus), "memory": _quantity_mb(node.hardware.memory_mb), "pods": str(MAX_PODS)}
    if node.hardware.gpus and node.hardware.gpus.count:
        cap[GPU_RESOURCE] = str(node.hardware.gpus.count)
    return cap


def _labels(cluster: Cluster, workers: list[Node], fabric: Fabric | None) -> tuple[tuple[str, ...], dict[str, dict[str, str]]]:
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    prefix = k8s.label_prefix
    levels = fabric.levels if fabric else ()
    where = fabric.level_of() if fabric else {}
    keys = tuple(f"{prefix}/{lvl}" for lvl in levels) + (HOSTNAME_LABEL,)
    labels: dict[str, dict[str, str]] = {}
    for n in workers:
        mine = {PARTITION_LABEL: "kubernetes", GPU_LABEL: flavor_of(n)}
        for lvl in levels:
            if lvl in where.get(n.name, {}):
                mine[f"{prefix}/{lvl}"] = where[n.name][lvl]
        labels[n.name] = mine
    return keys, labels


def _quantity_mb(mb: int) -> str:
    """*mb* MiB in the canonical form Kubernetes writes back (``64000000Mi`` is ``62500Gi``).

    Kueue's controller rewrites a ClusterQueue's quotas in that form; a quota rendered any
    other way would then be owned by Kueue and conflict with railyard's next apply.
    """
    suffixes = ("Mi", "Gi", "Ti", "Pi", "Ei")
    i = 0
    while mb and mb % 1024 == 0 and i < len(suffixes) - 1:
        mb //= 1024
        i += 1
    return f"{mb}{suffixes[i]}" if mb else "0"


def weight_quantity(weight: float) -> str:
    """A fair-sharing weight in the canonical form Kueue writes back (``2``, ``1500m``), as
    _quantity_mb does for memory: any other form would read back as drift. validate allows
    at most three decimals."""
    milli = round(weight * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _amounts(have: dict[str, int], got: Any) -> dict[str, str]:
    """A Resources block (cpu, memory_mb, gpu) -> Kubernetes quantities by resource name."""
    out = {}
    if got is None:
        return out
    if got.cpu is not None:
        out["cpu"] = str(got.cpu)
    if got.memory_mb is not None:
        out["memory"] = _quantity_mb(got.memory_mb)
    if got.gpu is not None and have.get("gpu"):
        out[GPU_RESOURCE] = str(got.gpu)
    return out


def _preemption(cq: Any, priorities: dict[str, int]) -> dict[str, Any]:
    """Every field written, on every queue (Kueue's defaults where the spec gives none): the
    API server fills them in anyway, so this reads back as the plan, and a policy edited by
    hand on any queue is drift."""
    from railyard.spec import Preemption

    p = cq.preemption or Preemption()
    borrow: dict[str, Any] = {"policy": p.borrow_within_cohort}
    if p.borrow_max_priority is not None:
        borrow["maxPriorityThreshold"] = priorities[p.borrow_max_priority]
    return {"borrowWithinCohort": borrow, "reclaimWithinCohort": p.reclaim_within_cohort,
            "withinClusterQueue": p.within_cluster_queue}


def priority_objects(cluster: Cluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The spec's priority classes: (Kueue WorkloadPriorityClasses, Kubernetes PriorityClasses)."""
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    kueue, core = [], []
    for pc in k8s.priority_classes:
        described = {"description": pc.description} if pc.description else {}
        kueue.append({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": pc.name},
                      "value": pc.value, **described})
        core.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc.name},
                     "value": pc.value, "globalDefault": False,
                     "preemptionPolicy": "PreemptLowerPriority" if pc.preempts else "Never", **described})
    return kueue, core


def _kueue(cluster: Cluster, workers: list[Node], keys: tuple[str, ...], has_fabric: bool) -> list[dict[str, Any]]:
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    kueue = k8s.kueue
    if not kueue.enabled:
        return []
    capacity = flavor_capacity(workers)
    flavors = sorted(capacity, key=lambda f: (f == "cpu", f))
    has_gpus = any(capacity[f]["gpu"] for f in flavors)
    objs: list[dict[str, Any]] = []
    if has_fabric:
        objs.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "Topology",
                "metadata": {"name": TOPOLOGY_NAME},
                "spec": {"levels": [{"nodeLabel": k} for k in keys]},
            }
        )
    for f in flavors:
        spec: dict[str, Any] = {"nodeLabels": {GPU_LABEL: f, PARTITION_LABEL: "kubernetes"}}
        if has_fabric:
            spec["topologyName"] = TOPOLOGY_NAME
        objs.append({"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f}, "spec": spec})
    objs += priority_objects(cluster)[0]
    priorities = {pc.name: pc.value for pc in k8s.priority_classes}
    for c in kueue.cohorts:
        cohort_spec: dict[str, Any] = {"parentName": c.parent} if c.parent else {}
        if kueue.fair_sharing:
            cohort_spec["fairSharing"] = {"weight": weight_quantity(c.fair_sharing_weight or 1)}
        objs.append({"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": {"name": c.name}, "spec": cohort_spec})
    covered = ["cpu", "memory"] + ([GPU_RESOURCE] if has_gpus else [])
    cluster_queues = kueue.cluster_queues
    local_queues = kueue.local_queues
    if not cluster_queues:  # one queue with everything, so a fresh cluster admits jobs
        from railyard.spec import ClusterQueue, LocalQueue

        cluster_queues = [ClusterQueue(name="default")]
        local_queues = local_queues or [LocalQueue(name="default", namespace="default", cluster_queue="default")]
    for cq in cluster_queues:
        flavor_specs = []
        for f in flavors:
            have = capacity[f]
            quota = (cq.quotas or {}).get(f) if cq.quotas is not None else None
            if cq.quotas is not None and quota is None:
                cpu = mem = gpu = 0
            else:
                cpu = quota.cpu if quota and quota.cpu is not None else have["cpu"]
                mem = quota.memory_mb if quota and quota.memory_mb is not None else have["memory_mb"]
                gpu = quota.gpu if quota and quota.gpu is not None else have["gpu"]
            # Quantities as strings, the form the API server stores and returns: drift
            # compares the plan with what it reads back, and a numeric quota re-applied next
            # to a running Kueue manager conflicted on .spec.resourceGroups in the lab try.
            resources = [
                {"name": "cpu", "nominalQuota": str(cpu)},
                {"name": "memory", "nominalQuota": _quantity_mb(mem)},
            ]
            if has_gpus:
                resources.append({"name": GPU_RESOURCE, "nominalQuota": str(gpu)})
            borrowing = _amounts(have, quota.borrowing_limit if quota else None)
            lending = _amounts(have, quota.lending_limit if quota else None)
            for r in resources:
                if r["name"] in borrowing:
                    r["borrowingLimit"] = borrowing[r["name"]]
                if r["name"] in lending:
                    r["lendingLimit"] = lending[r["name"]]
            flavor_specs.append({"name": f, "resources": resources})
        spec = {}
        if cq.cohort:
            spec["cohortName"] = cq.cohort
        spec["namespaceSelector"] = (
            {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(cq.namespaces)}]}
            if cq.namespaces
            else {}
        )
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": flavor_specs}]
        spec["preemption"] = _preemption(cq, priorities)
        if kueue.fair_sharing:  # every queue's weight (1 unless the spec says), so an edit is drift
            spec["fairSharing"] = {"weight": weight_quantity(cq.fair_sharing_weight or 1)}
        objs.append({"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq.name}, "spec": spec})
    # A LocalQueue lives in a namespace that must exist first; Namespaces lead the list.
    objs[:0] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in sorted({lq.namespace for lq in local_queues} - {"default"})
    ]
    for lq in local_queues:
        objs.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"namespace": lq.namespace, "name": lq.name},
                "spec": {"clusterQueue": lq.cluster_queue},
            }
        )
    return objs


def _volcano(cluster: Cluster, workers: list[Node], fabric: Fabric | None) -> list[dict[str, Any]]:
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    if not k8s.volcano.enabled:
        return []
    objs: list[dict[str, Any]] = priority_objects(cluster)[1]
    for q in k8s.volcano.queues:
        # No capability: Kueue holds the quota; capping here too would count it twice.
        objs.append(
            {
                "apiVersion": VOLCANO_API,
                "kind": "Queue",
                "metadata": {"name": q.name},
                "spec": {"weight": q.weight, "reclaimable": q.reclaimable},
            }
        )
    if fabric is None:
        return objs
    names = {n.name for n in workers}
    with_tier_name = version_at_least(cluster.cluster.versions.volcano, "1.14.0")
    present = [lvl for lvl in VOLCANO_LEVELS if lvl in fabric.groups]
    kept: dict[str, set[str]] = {}
    for tier, level in enumerate(present, start=1):
        kept[level] = set()
        for group in fabric.groups[level]:
            if tier == 1:
                members = [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in group.nodes if n in names]
            else:
                below = present[tier - 2]
                children = _children(fabric, level, group, below)
                members = [
                    {"type": "HyperNode", "selector": {"exactMatch": {"name": c}}} for c in children if c in kept[below]
                ]
            if not members:
                continue
            kept[level].add(group.name)
            spec: dict[str, Any] = {"tier": tier}
            if with_tier_name:
                spec["tierName"] = level
            spec["members"] = members
            objs.append({"apiVersion": HYPERNODE_API, "kind": "HyperNode", "metadata": {"name": group.name}, "spec": spec})
    return objs


def _children(fabric: Fabric, level: str, group: Any, below: str) -> list[str]:
    if level == "su" and below == "nvlink":
        mine = set(group.nodes)
        return [d.name for d in fabric.groups["nvlink"] if d.nodes and d.nodes[0] in mine]
    return list(group.children)


def _scheduler_conf(with_topology: bool) -> dict[str, Any]:
    """volcano-scheduler.conf: the shipped default with GPUs binpacked, plus
    network-topology-aware for HyperNodes."""
    second = [
        {"name": "overcommit"},
        {"name": "drf", "enablePreemptable": False},
        {"name": "predicates"},
        {"name": "proportion"},
        {"name": "nodeorder"},
        # GPUs packed first (binpack counts only CPU and memory unless told): a partly used
        # node fills up before an idle one is touched, so whole nodes, and whole SUs, stay
        # free for the next gang. Weighted over nodeorder's least-requested spreading.
        {"name": "binpack", "arguments": {"binpack.weight": 10, "binpack.resources": GPU_RESOURCE,
                                          f"binpack.resources.{GPU_RESOURCE}": 10}},
    ]
    if with_topology:
        second.append({"name": "network-topology-aware", "arguments": {"weight": 10}})
    first = [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]
    return {"actions": "enqueue, allocate, backfill", "tiers": [{"plugins": first}, {"plugins": second}]}


def compile_kubernetes(cluster: Cluster, nodes: list[Node], fabric: Fabric | None) -> KubernetesPlan | None:
    k8s = cluster.partitions.kubernetes
    if k8s is None:
        return None
    workers = [n for n in nodes if "k8s_worker" in n.roles]
    keys, labels = _labels(cluster, workers, fabric)
    return KubernetesPlan(
        control_plane=tuple(n.name for n in nodes if "k8s_control_plane" in n.roles),
        workers=tuple(n.name for n in workers),
        label_keys=keys,
        labels=labels,
        capacity={n.name: node_capacity(n) for n in workers},
        agents={n.name: cluster.nodes[n.group_index].agent for n in workers},
        kueue=tuple(_kueue(cluster, workers, keys, fabric is not None)),
        volcano=tuple(_volcano(cluster, workers, fabric)),
        volcano_scheduler_conf=_scheduler_conf(fabric is not None),
        network=pod_addresses(cluster, workers),
    )

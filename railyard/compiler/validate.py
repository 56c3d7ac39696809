"""Rules that span fields. Every rule reports a YAML path and what to change."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from railyard import builds
from railyard.compiler.fabric import Fabric, build_fabric
from railyard.compiler.nodes import Node, hostlist_field, in_lab, resolve_nodes
from railyard.compiler.slurm import SACKD_FROM, block_layout, topology_format
from railyard.errors import Problem
from railyard.spec import Cluster, version_at_least


def resolve(cluster: Cluster) -> tuple[list[Node], Fabric | None, list[Problem]]:
    """Nodes and fabric, with every problem found on the way."""
    nodes, problems = resolve_nodes(cluster)
    fabric, fabric_problems = build_fabric(cluster, nodes)
    return nodes, fabric, problems + fabric_problems


def check(cluster: Cluster) -> tuple[list[Node], Fabric | None, list[Problem]]:
    """Resolve nodes and fabric and apply every cross-field rule."""
    nodes, fabric, problems = resolve(cluster)
    by_name = {n.name: n for n in nodes}
    _fabric_membership(nodes, fabric, problems)
    _slurm(cluster, by_name, fabric, problems)
    _kubernetes(cluster, nodes, fabric, problems)
    _agents(cluster, nodes, problems)
    _storage(cluster, by_name, problems)
    return nodes, fabric, problems


def validate(cluster: Cluster) -> list[Problem]:
    return check(cluster)[2]


def _fabric_membership(nodes: list[Node], fabric: Fabric | None, problems: list[Problem]) -> None:
    if fabric is None:
        return
    on = set(fabric.nodes)
    missing: dict[int, list[str]] = defaultdict(list)
    for n in nodes:
        if ("slurm_compute" in n.roles or "k8s_worker" in n.roles) and n.name not in on:
            missing[n.group_index].append(n.name)
    for gi, names in missing.items():
        problems.append(
            Problem(
                f"nodes[{gi}]",
                f"compute node(s) {', '.join(names[:5])} are under no fabric switch; add them to "
                "fabric (an SU or explicit links) so the schedulers can place jobs by topology",
            )
        )


def _slurm(cluster: Cluster, nodes: dict[str, Node], fabric: Fabric | None, problems: list[Problem]) -> None:
    slurm = cluster.partitions.slurm
    if slurm is None:
        return
    base = "partitions.slurm"
    version = cluster.cluster.versions.slurm
    controllers = [n for n in nodes.values() if "slurm_controller" in n.roles]
    if len(controllers) > 2:
        problems.append(Problem(f"{base}.controllers", "name one or two controllers (primary and backup)"))

    names = Counter(p.name for p in slurm.partitions)
    for name, count in names.items():
        if count > 1:
            problems.append(Problem(f"{base}.partitions", f"partition '{name}' is defined {count} times; names must be unique"))
    defaults = [p.name for p in slurm.partitions if p.default]
    if len(defaults) > 1:
        problems.append(Problem(f"{base}.partitions", f"partitions {', '.join(defaults)} are all default; mark at most one 'default: true'"))

    compute = {name for name, n in nodes.items() if "slurm_compute" in n.roles}
    layout, block_problems = block_layout(cluster, fabric, compute)
    problems.extend(block_problems)
    has_nvlink = bool(layout.blocks)
    fmt = slurm.topology
    if (fmt == "block" or (fmt == "auto" and has_nvlink)) and not version_at_least(version, "24.05"):
        problems.append(
            Problem(
                f"{base}.topology" if fmt == "block" else "cluster.versions.slurm",
                f"topology/block (NVLink domains) needs Slurm 24.05 or later, but the target is {version}; "
                "raise cluster.versions.slurm or set partitions.slurm.topology: tree",
            )
        )
    if fmt == "block" and not has_nvlink:
        problems.append(Problem(
            f"{base}.topology",
            "topology 'block' needs NVLink domains in the fabric (fabric.*.nvlink) that hold Slurm compute nodes"))
    rendered = topology_format(cluster, fabric, has_nvlink) in ("block", "yaml")
    if rendered and layout.partial and not version_at_least(version, PARTIAL_BLOCKS_FROM):
        for block in layout.partial:
            problems.append(
                Problem(
                    block.path,
                    f"NVLink domain {block.name} has {block.nodes} Slurm node(s), fewer than the base block "
                    f"size {layout.sizes[0]}; Slurm {version} refuses such a block (slurmctld: fatal: Block "
                    f"configuration ({block.name}) children count lower than bblock_node_cnt): put all of the "
                    f"domain's nodes in Slurm partitions (spares and Kubernetes workers are outside its block), "
                    f"or target Slurm {PARTIAL_BLOCKS_FROM} or later (cluster.versions.slurm), which accepts it",
                )
            )
    if fmt == "yaml" and not version_at_least(version, "25.05"):
        problems.append(Problem(f"{base}.topology", f"topology.yaml needs Slurm 25.05 or later, not {version}; use 'tree' or 'block'"))
    if fmt in ("tree", "block", "yaml") and fabric is None:
        problems.append(Problem(f"{base}.topology", f"topology '{fmt}' needs a fabric; add 'fabric' or set topology: auto"))
    uses_yaml = fmt == "yaml" or (fmt == "auto" and has_nvlink and version_at_least(version, "25.05"))
    for pi, part in enumerate(slurm.partitions):
        if part.topology is not None and not uses_yaml:
            problems.append(
                Problem(
                    f"{base}.partitions[{pi}].topology",
                    "a per-partition topology needs topology.yaml (Slurm 25.05+ and partitions.slurm.topology: yaml)",
                )
            )
        if part.topology == "nvlink" and not has_nvlink:
            problems.append(Problem(f"{base}.partitions[{pi}].topology", "'nvlink' needs NVLink domains in the fabric"))
    if slurm.config_delivery == "configless" and not version_at_least(version, SACKD_FROM):
        problems.append(
            Problem(
                f"{base}.config_delivery",
                f"configless Slurm needs sackd on the login nodes, new in Slurm {SACKD_FROM}, but the "
                f"target is {version}: set config_delivery: files, or raise cluster.versions.slurm to "
                f"{SACKD_FROM} or later",
            )
        )
    if slurm.gres_autodetect == "nvidia" and not version_at_least(version, "24.11"):
        problems.append(Problem(f"{base}.gres_autodetect", f"AutoDetect=nvidia needs Slurm 24.11+, not {version}; use 'nvml' or 'off'"))
    for pi, part in enumerate(slurm.partitions):
        if not part.def_cpu_per_gpu:
            continue  # nothing to check: spare expanding a hostlist of maybe 100,000 nodes
        for name in hostlist_field(part.nodes, f"{base}.partitions[{pi}].nodes", nodes, []):
            hw = nodes[name].hardware
            if hw.gpus and part.def_cpu_per_gpu * hw.gpus.count > hw.cpus:
                problems.append(
                    Problem(
                        f"{base}.partitions[{pi}].def_cpu_per_gpu",
                        f"{part.def_cpu_per_gpu} CPUs per GPU x {hw.gpus.count} GPUs exceeds the {hw.cpus} CPUs of {name}; lower it",
                    )
                )
                break
    for tool in ("pyxis", "enroot"):
        cfg = getattr(slurm, tool)
        if cfg.enabled and cfg.package is None:
            problems.append(
                Problem(
                    f"{base}.{tool}.package",
                    f"{tool} is enabled but has no package source; give package: {{url|path|apt: ...}} "
                    f"or set {tool}.enabled: false",
                )
            )
    if slurm.pyxis.enabled and not slurm.enroot.enabled:
        problems.append(
            Problem(
                f"{base}.enroot.enabled",
                "Pyxis is enabled (partitions.slurm.pyxis.enabled) but Enroot is not: Pyxis runs every "
                "--container-image through Enroot on the same nodes, so srun would fail there; set "
                "enroot.enabled: true (with a package) or pyxis.enabled: false",
            )
        )
    _accounting(cluster, nodes, problems)
    if slurm.pam_slurm_adopt is not None and not slurm.cgroups:
        problems.append(Problem(
            f"{base}.pam_slurm_adopt",
            "pam_slurm_adopt puts an ssh session into the cgroup of the user's job on that node, and "
            "with cgroups: false jobs have none (and the session would outlive the job): set "
            "partitions.slurm.cgroups: true, or remove pam_slurm_adopt"))


def _tres_fields(owner: Any) -> list[tuple[str, dict[str, int]]]:
    return [(f, getattr(owner, f)) for f in ("grp_tres", "max_tres_per_user", "max_tres_per_job")
            if getattr(owner, f, None)]


def _accounting(cluster: Cluster, nodes: dict[str, Node], problems: list[Problem]) -> None:
    """Accounting's cross-field rules: where slurmdbd and its database are, and an account
    tree, users and QOS that sacctmgr can hold as written."""
    slurm = cluster.partitions.slurm
    assert slurm is not None
    base = "partitions.slurm"
    acct = slurm.accounting
    if acct is None:
        for pi, part in enumerate(slurm.partitions):
            if part.qos is not None:
                problems.append(Problem(f"{base}.partitions[{pi}].qos",
                                        "a partition QOS needs accounting: add partitions.slurm.accounting "
                                        "(slurmdbd holds the QOS) or remove qos"))
        return
    path = f"{base}.accounting"
    if acct.storage_host in nodes and acct.storage_host != acct.host:
        problems.append(Problem(
            f"{path}.storage_host",
            f"{acct.storage_host} is a node of this spec but not the slurmdbd node ({acct.host}); railyard "
            f"installs MariaDB on the slurmdbd node: set storage_host: {acct.host}, or name a database "
            "server the site runs"))
    gpu_types = {n.hardware.gpus.type for n in nodes.values() if "slurm_compute" in n.roles and n.hardware.gpus}
    qos_names = [q.name for q in acct.qos]
    _unique(qos_names, f"{path}.qos", "QOS", problems)
    known_qos = {*qos_names, "normal"}  # normal: the QOS Slurm always has
    limits_given = False
    owners = ([(f"{path}.qos[{i}]", q) for i, q in enumerate(acct.qos)]
              + [(f"{path}.accounts[{i}]", a) for i, a in enumerate(acct.accounts)]
              + [(f"{path}.users[{i}]", u) for i, u in enumerate(acct.users)])
    for where, owner in owners:
        tres = _tres_fields(owner)
        limits_given |= bool(tres) or any(getattr(owner, f, None) is not None
                                          for f in ("max_jobs", "max_jobs_per_user", "max_submit_jobs_per_user"))
        for field, limits in tres:
            for name in limits:
                if name.startswith("gres/gpu") and not gpu_types:
                    problems.append(Problem(f"{where}.{field}", f"limits {name}, but no Slurm compute node has "
                                            "GPUs: remove the GPU limit or give the nodes hardware.gpus"))
                elif name.startswith("gres/gpu:") and name.split(":", 1)[1] not in gpu_types:
                    problems.append(Problem(f"{where}.{field}", f"{name}: no Slurm compute node has GPUs of type "
                                            f"{name.split(':', 1)[1]!r}; use one of {', '.join(sorted(gpu_types))}"))
    if limits_given and "limits" not in acct.enforce:
        problems.append(Problem(f"{path}.enforce", "limits are given but enforce lacks 'limits', so Slurm would "
                                "not apply them: add 'limits' (and 'associations', 'qos', 'safe')"))

    accounts = {a.name: a for a in acct.accounts}
    _unique([a.name for a in acct.accounts], f"{path}.accounts", "account", problems)
    for i, a in enumerate(acct.accounts):
        where = f"{path}.accounts[{i}]"
        if a.name == "root":
            problems.append(Problem(f"{where}.name", "root is Slurm's own top account; name yours otherwise "
                                    "(accounts without a parent sit under root)"))
        if a.parent != "root" and a.parent not in accounts:
            problems.append(Problem(f"{where}.parent", f"account '{a.parent}' is not in accounting.accounts; "
                                    "add it, or leave parent out to put this account under root"))
        for qi, q in enumerate(a.qos):
            if q not in known_qos:
                problems.append(Problem(f"{where}.qos[{qi}]", f"QOS '{q}' is not in accounting.qos; add it there"))
        if a.default_qos is not None:
            if a.default_qos not in known_qos:
                problems.append(Problem(f"{where}.default_qos", f"QOS '{a.default_qos}' is not in accounting.qos; "
                                        "add it there"))
            elif a.qos and a.default_qos not in a.qos:
                problems.append(Problem(f"{where}.default_qos", f"'{a.default_qos}' is not among the account's qos "
                                        f"({', '.join(a.qos)}): add it there"))
    _tree_cycles(acct.accounts, f"{path}.accounts", "accounts", "Slurm accounts are a tree under root", problems)

    first: dict[str, int] = {}
    for i, u in enumerate(acct.users):
        where = f"{path}.users[{i}]"
        if u.name in first:
            other = acct.users[first[u.name]]
            problems.append(Problem(
                where, f"user '{u.name}' is listed twice (users[{first[u.name]}] too, default accounts "
                f"'{other.default_account}' and '{u.default_account}'); a user has one default account: list "
                "them once, with their other accounts under accounts"))
            continue
        first[u.name] = i
        for field, names in (("default_account", [u.default_account]), ("accounts", u.accounts)):
            for name in names:
                if name not in accounts:
                    problems.append(Problem(f"{where}.{field}", f"account '{name}' is not in accounting.accounts; "
                                            "add it there"))
    for pi, part in enumerate(slurm.partitions):
        if part.qos is None:
            continue
        where = f"{base}.partitions[{pi}].qos"
        q = next((q for q in acct.qos if q.name == part.qos), None)
        if q is None:
            problems.append(Problem(where, f"QOS '{part.qos}' is not in accounting.qos; add it there"))
            continue
        gpu_limited = [f for f, limits in _tres_fields(q) if any(n.startswith("gres/gpu") for n in limits)]
        names = hostlist_field(part.nodes, f"{base}.partitions[{pi}].nodes", nodes, [])
        if gpu_limited and not any(nodes[n].hardware.gpus for n in names if n in nodes):
            problems.append(Problem(where, f"QOS '{q.name}' limits GPUs ({', '.join(gpu_limited)}), but partition "
                                    f"'{part.name}' has no node with GPUs: give it a QOS without GPU limits"))


# Slurm 25.05 accepts a block with fewer nodes than the base block size (SchedMD commits
# 700ca4f85f "Support for topology/block with gaps", 8f59f086f8 "Make AllowGaps=yes
# default"); 24.05 and 24.11 stop slurmctld on it (block_record_validate).
PARTIAL_BLOCKS_FROM = "25.05"


def _installable(named: str, built: str, field: str, what: str, problems: list[Problem], lab: bool = False) -> None:
    """A release the roles cannot install is refused here, naming the one they can."""
    if named != built:
        who = "the lab runs" if lab else "railyard installs"
        problems.append(Problem(
            f"cluster.versions.{field}",
            f"{what} {named} cannot be installed: {who} {what} {built}, the release scripts/build-k8s.sh "
            f'builds (railyard/builds.py); set cluster.versions.{field}: "{built}"',
        ))


def _kubernetes(cluster: Cluster, nodes: list[Node], fabric: Fabric | None, problems: list[Problem]) -> None:
    k8s = cluster.partitions.kubernetes
    if k8s is None:
        return
    base = "partitions.kubernetes"
    versions = cluster.cluster.versions
    if k8s.kueue.enabled and not version_at_least(versions.kueue, "0.15.0"):
        problems.append(Problem("cluster.versions.kueue", f"railyard writes Kueue v1beta2 objects, served from Kueue 0.15; {versions.kueue} is too old"))
    elif k8s.kueue.enabled:
        _installable(versions.kueue, builds.KUEUE, "kueue", "Kueue", problems)
    if k8s.volcano.enabled and fabric is not None and not version_at_least(versions.volcano, "1.12.0"):
        problems.append(Problem("cluster.versions.volcano", f"HyperNodes need Volcano 1.12 or later, not {versions.volcano}"))
    elif k8s.volcano.enabled:
        _installable(versions.volcano, builds.VOLCANO, "volcano", "Volcano", problems)
    # The lab's control plane and kubelets are the build; elsewhere the control plane
    # comes from the official release of the spec's minor.
    if nodes and in_lab(nodes):
        _installable(versions.kubernetes, builds.kubernetes_minor(), "kubernetes", "Kubernetes", problems, lab=True)

    _pod_network(cluster, sum("k8s_worker" in n.roles for n in nodes), problems)
    _control_plane_size(sum("k8s_control_plane" in n.roles for n in nodes), problems)

    kueue = k8s.kueue
    cohorts = {c.name for c in kueue.cohorts}
    for i, c in enumerate(kueue.cohorts):
        if c.parent is not None and c.parent not in cohorts:
            problems.append(Problem(f"{base}.kueue.cohorts[{i}].parent", f"no cohort named '{c.parent}'; define it under kueue.cohorts"))
    _unique([c.name for c in kueue.cohorts], f"{base}.kueue.cohorts", "cohort", problems)
    _unique([q.name for q in kueue.cluster_queues], f"{base}.kueue.cluster_queues", "cluster queue", problems)
    _unique([f"{q.namespace}/{q.name}" for q in kueue.local_queues], f"{base}.kueue.local_queues", "local queue", problems)
    _unique([q.name for q in k8s.volcano.queues], f"{base}.volcano.queues", "queue", problems)
    _tree_cycles(kueue.cohorts, f"{base}.kueue.cohorts", "cohorts", "Kueue cohorts are a tree", problems)
    cqs = {q.name: q for q in kueue.cluster_queues}
    for i, lq in enumerate(kueue.local_queues):
        if lq.cluster_queue not in cqs:
            problems.append(Problem(f"{base}.kueue.local_queues[{i}].cluster_queue", f"no cluster queue named '{lq.cluster_queue}'; define it under kueue.cluster_queues"))
            continue
        allowed = cqs[lq.cluster_queue].namespaces
        if allowed is not None and lq.namespace not in allowed:
            problems.append(
                Problem(
                    f"{base}.kueue.local_queues[{i}].namespace",
                    f"local queue {lq.namespace}/{lq.name} points at cluster queue '{lq.cluster_queue}', which "
                    f"admits only namespaces {', '.join(allowed)}: this queue could never admit a job; add "
                    f"'{lq.namespace}' to that cluster queue's namespaces or move the local queue",
                )
            )

    _kueue_policy(k8s, problems)

    from railyard.compiler.kubernetes import flavor_capacity

    capacity = flavor_capacity([n for n in nodes if "k8s_worker" in n.roles])
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for i, cq in enumerate(kueue.cluster_queues):
        path = f"{base}.kueue.cluster_queues[{i}]"
        if cq.cohort is not None and cq.cohort not in cohorts:
            problems.append(Problem(f"{path}.cohort", f"no cohort named '{cq.cohort}'; define it under kueue.cohorts"))
        for flavor, quota in (cq.quotas or {}).items():
            if flavor not in capacity:
                problems.append(
                    Problem(f"{path}.quotas.{flavor}", f"no workers of flavor '{flavor}'; flavors here: {', '.join(sorted(capacity)) or 'none'}")
                )
                continue
            for limit in ("borrowing_limit", "lending_limit"):
                if getattr(quota, limit) is not None and getattr(quota, limit).gpu is not None \
                        and not capacity[flavor]["gpu"]:
                    problems.append(Problem(
                        f"{path}.quotas.{flavor}.{limit}.gpu",
                        f"'{flavor}' workers have no GPUs, so there are none to borrow or lend; drop {limit}.gpu",
                    ))
            for resource in ("cpu", "memory_mb", "gpu"):
                lent = getattr(quota.lending_limit, resource) if quota.lending_limit else None
                nominal = getattr(quota, resource)
                nominal = capacity[flavor][resource] if nominal is None else nominal
                if lent is not None and lent > nominal:
                    problems.append(Problem(
                        f"{path}.quotas.{flavor}.lending_limit.{resource}",
                        f"lends {lent} but its nominal quota is {nominal}: a queue lends only what it has; "
                        f"lower lending_limit.{resource} to at most {nominal}",
                    ))
                asked = getattr(quota, resource)
                if asked is None:
                    continue
                have = capacity[flavor][resource]
                totals[(flavor, resource)] += asked
                if asked > have:
                    problems.append(
                        Problem(
                            f"{path}.quotas.{flavor}.{resource}",
                            f"quota {asked} is more than the partition has ({have} {resource} on '{flavor}' workers); "
                            f"lower it to at most {have} or add workers",
                        )
                    )
    for (flavor, resource), asked in sorted(totals.items()):
        have = capacity[flavor][resource]
        if asked > have and len(kueue.cluster_queues) > 1:
            problems.append(
                Problem(
                    f"{base}.kueue.cluster_queues",
                    f"nominal {resource} quotas on '{flavor}' add up to {asked} but the workers have {have}; "
                    "lower them so they fit (borrowing inside a cohort covers the rest)",
                )
            )


def _kueue_policy(k8s: Any, problems: list[Problem]) -> None:
    """Priority classes, preemption, borrowing limits and fair sharing: the rules Kueue's
    webhooks would apply later, on the cluster, said here with the spec's path and fix."""
    base = "partitions.kubernetes"
    kueue = k8s.kueue
    _unique([pc.name for pc in k8s.priority_classes], f"{base}.priority_classes", "priority class", problems)
    classes = {pc.name for pc in k8s.priority_classes}
    for i, c in enumerate(kueue.cohorts):
        if c.fair_sharing_weight is not None:
            _weight(c.fair_sharing_weight, kueue.fair_sharing, f"{base}.kueue.cohorts[{i}].fair_sharing_weight",
                    problems)
    for i, cq in enumerate(kueue.cluster_queues):
        path = f"{base}.kueue.cluster_queues[{i}]"
        if cq.fair_sharing_weight is not None:
            _weight(cq.fair_sharing_weight, kueue.fair_sharing, f"{path}.fair_sharing_weight", problems)
        if cq.cohort is None:
            for flavor, quota in (cq.quotas or {}).items():
                for limit in ("borrowing_limit", "lending_limit"):
                    if getattr(quota, limit) is not None:
                        problems.append(Problem(
                            f"{path}.quotas.{flavor}.{limit}",
                            f"queue '{cq.name}' is in no cohort, so it has no one to "
                            f"{'borrow from' if limit == 'borrowing_limit' else 'lend to'}; "
                            f"set its cohort or drop {limit}",
                        ))
        p = cq.preemption
        if p is None:
            continue
        if cq.cohort is None:
            for name, value in (("reclaim_within_cohort", p.reclaim_within_cohort),
                                ("borrow_within_cohort", p.borrow_within_cohort)):
                if value != "Never":
                    problems.append(Problem(
                        f"{path}.preemption.{name}",
                        f"queue '{cq.name}' is in no cohort, so {name}: {value} can never act; set its cohort or "
                        f"make it Never",
                    ))
        if p.borrow_within_cohort != "Never" and p.reclaim_within_cohort == "Never":
            problems.append(Problem(
                f"{path}.preemption.borrow_within_cohort",
                "preempting while borrowing needs reclaim_within_cohort too (Kueue refuses "
                "reclaimWithinCohort=Never with borrowWithinCohort); set reclaim_within_cohort to LowerPriority "
                "or Any, or borrow_within_cohort to Never",
            ))
        if p.borrow_within_cohort != "Never" and kueue.fair_sharing:
            problems.append(Problem(
                f"{path}.preemption.borrow_within_cohort",
                "Kueue preempts while borrowing only without fair sharing (with it, fair sharing decides what to "
                "preempt); set borrow_within_cohort to Never or kueue.fair_sharing to false",
            ))
        if p.borrow_max_priority is not None:
            if p.borrow_max_priority not in classes:
                known = ", ".join(sorted(classes)) or "none"
                problems.append(Problem(
                    f"{path}.preemption.borrow_max_priority",
                    f"no priority class named '{p.borrow_max_priority}' (defined: {known}); add it to "
                    f"{base}.priority_classes or name one of those",
                ))
            if p.borrow_within_cohort == "Never":
                problems.append(Problem(
                    f"{path}.preemption.borrow_max_priority",
                    "applies only to preemption while borrowing; set borrow_within_cohort: LowerPriority or drop "
                    "borrow_max_priority",
                ))


def _weight(weight: float, enabled: bool, path: str, problems: list[Problem]) -> None:
    if not enabled:
        problems.append(Problem(path, "a fair-sharing weight does nothing while fair sharing is off; set "
                                      "partitions.kubernetes.kueue.fair_sharing: true or drop the weight"))
    if abs(weight * 1000 - round(weight * 1000)) > 1e-6 or round(weight * 1000) == 0:
        problems.append(Problem(path, f"{weight} has more than three decimals (Kueue keeps weights to the "
                                      "thousandth); round it, e.g. to 0.001 or more"))


def _pod_network(cluster: Cluster, workers: int, problems: list[Problem]) -> None:
    """Pods, Services and nodes each need addresses of their own, and every worker a block."""
    k8s = cluster.partitions.kubernetes
    assert k8s is not None
    path = "partitions.kubernetes.network"
    net = k8s.network
    if net.service_cidr.prefixlen < 12:
        problems.append(Problem(f"{path}.service_cidr", f"{net.service_cidr} is wider than the apiserver accepts "
                                "(at most a /12, 1,048,576 Services); use a /12 or narrower"))
    elif net.service_cidr.num_addresses < 16:
        problems.append(Problem(f"{path}.service_cidr", f"{net.service_cidr} has {net.service_cidr.num_addresses} "
                                "addresses; the cluster DNS is the tenth: use a /28 or wider"))
    if net.pod_cidr.prefixlen >= net.node_prefix:
        problems.append(Problem(f"{path}.node_prefix", f"each worker's block (/{net.node_prefix}) must be narrower than "
                                f"pod_cidr {net.pod_cidr}; raise node_prefix or widen pod_cidr"))
    elif workers > 2 ** (net.node_prefix - net.pod_cidr.prefixlen):
        blocks = 2 ** (net.node_prefix - net.pod_cidr.prefixlen)
        problems.append(Problem(f"{path}.pod_cidr", f"{net.pod_cidr} holds {blocks} blocks of /{net.node_prefix} but the "
                                f"partition has {workers} workers, one block each; widen pod_cidr or raise node_prefix"))
    ranges = (("pod_cidr", net.pod_cidr), ("service_cidr", net.service_cidr),
              ("the management network", cluster.network.management.cidr))
    for i, (name, a) in enumerate(ranges):
        for other, b in ranges[i + 1:]:
            if a.overlaps(b):
                problems.append(Problem(f"{path}.{name}", f"{a} overlaps {other} ({b}): a packet to an address "
                                        "in both could not be routed; pick ranges that do not overlap"))


def _control_plane_size(count: int, problems: list[Problem]) -> None:
    """Each control-plane node runs one etcd member. An even count buys nothing (2 members
    stop on either one's failure, 4 tolerate one failure as 3 do, with more to replicate),
    and etcd's own guidance stops at 7: more members make every write slower."""
    if count > 1 and (count % 2 == 0 or count > 7):
        problems.append(Problem(
            "partitions.kubernetes.control_plane",
            f"{count} control-plane nodes make {count} etcd members: "
            + ("an even count tolerates no more failures than one node fewer" if count % 2 == 0
               else "etcd recommends at most 7 members, each write waits for a majority")
            + "; name 1, 3, 5 or 7 nodes (3 tolerate one node down)",
        ))


def _agents(cluster: Cluster, nodes: list[Node], problems: list[Problem]) -> None:
    """``agent: kwok`` only where it simulates something: a group with a Kubernetes worker."""
    workers = {n.group_index for n in nodes if "k8s_worker" in n.roles}
    for gi, group in enumerate(cluster.nodes):
        if group.agent == "kwok" and gi not in workers:
            problems.append(Problem(
                f"nodes[{gi}].agent",
                f"group '{group.group}' sets agent: kwok (a simulated kubelet), but none of its nodes is a "
                "Kubernetes worker (partitions.kubernetes.workers), so nothing would run it; remove "
                "'agent' from the group, or add its nodes to partitions.kubernetes.workers",
            ))


def _tree_cycles(items: list, path: str, what: str, rule: str, problems: list[Problem]) -> None:
    """Kueue cohorts and Slurm accounts form trees: a parent chain that comes back to where
    it started is refused, once per cycle."""
    parent = {c.name: c.parent for c in items}
    index = {c.name: i for i, c in enumerate(items)}
    reported: set[str] = set()
    for c in items:
        chain = [c.name]
        while (nxt := parent.get(chain[-1])) is not None and nxt in parent:
            if nxt in chain:
                cycle = chain[chain.index(nxt):]
                if not reported & set(cycle):
                    reported.update(cycle)
                    first = min(cycle, key=index.__getitem__)
                    loop = " -> ".join([*cycle, nxt]) if len(cycle) > 1 else f"{nxt} -> {nxt}"
                    problems.append(
                        Problem(
                            f"{path}[{index[first]}].parent",
                            f"{what} form a cycle ({loop}); {rule}: remove one parent",
                        )
                    )
                break
            chain.append(nxt)


def _unique(names: list[str], path: str, what: str, problems: list[Problem]) -> None:
    for name, count in Counter(names).items():
        if count > 1:
            problems.append(Problem(path, f"{what} '{name}' is defined {count} times; names must be unique"))


def _storage(cluster: Cluster, nodes: dict[str, Node], problems: list[Problem]) -> None:
    mounts: list[tuple[str, str]] = []  # (mount point, path)
    nfs = cluster.storage.nfs
    if nfs is not None:
        exports = {e.path for e in nfs.exports}
        _unique([e.path for e in nfs.exports], "storage.nfs.exports", "export", problems)
        for i, m in enumerate(nfs.mounts):
            path = f"storage.nfs.mounts[{i}]"
            if m.export not in exports:
                problems.append(Problem(f"{path}.export", f"'{m.export}' is not exported; add it to storage.nfs.exports or fix the path"))
            if m.clients != "all":
                hostlist_field(m.clients, f"{path}.clients", nodes, problems)
            mounts.append((m.mount_point, f"{path}.mount_point"))
        for i, e in enumerate(nfs.exports):
            net = e.clients or cluster.network.management.cidr
            if not net.overlaps(cluster.network.management.cidr):
                problems.append(Problem(f"storage.nfs.exports[{i}].clients", f"{net} does not overlap the management network; the nodes could not mount it"))
    lustre = cluster.storage.lustre
    if lustre is not None:
        if lustre.clients != "all":
            hostlist_field(lustre.clients, "storage.lustre.clients", nodes, problems)
        nets = {n.net for n in lustre.networks}
        for i, mgs in enumerate(lustre.mgs):
            for nid in mgs:
                if nid.split("@", 1)[1] not in nets:
                    problems.append(
                        Problem(f"storage.lustre.mgs[{i}]", f"NID {nid} is on LNet '{nid.split('@', 1)[1]}', which storage.lustre.networks does not configure; add it")
                    )
        mounts.append((lustre.mount_point, "storage.lustre.mount_point"))
    for i, (a, path_a) in enumerate(mounts):
        for b, path_b in mounts[i + 1 :]:
            if a == b or b.startswith(a.rstrip("/") + "/") or a.startswith(b.rstrip("/") + "/"):
                problems.append(Problem(path_b, f"mount point {b} overlaps {a} ({path_a}); give each filesystem its own, disjoint mount point"))


def notes(plan: Any) -> list[Problem]:
    """What is allowed but worth saying: ``railyard validate`` prints these with a valid spec."""
    out: list[Problem] = []
    fabric = plan.fabric
    if fabric is not None:
        sus = fabric.groups.get("su", ())
        sizes = Counter(len(g.nodes) for g in sus)
        if len(sizes) > 1:
            kind = "rail_optimized" if plan.spec.fabric.rail_optimized else "explicit"
            shown = ", ".join(f"{g.name} {len(g.nodes)}" for g in sus[:6]) + (", ..." if len(sus) > 6 else "")
            out.append(
                Problem(
                    f"fabric.{kind}",
                    f"scalable units differ in size ({shown} nodes); allowed, but a job that asks for "
                    f"one SU (--switches=1, a Kueue/Volcano SU) fits in at most {min(sizes)} nodes in the "
                    "smallest",
                )
            )
    if plan.slurm is not None and plan.slurm.partial_blocks:
        base = plan.slurm.block_sizes[0]
        for block in plan.slurm.partial_blocks:
            out.append(
                Problem(
                    block.path,
                    f"NVLink domain {block.name} has {block.nodes} Slurm node(s), fewer than the base block "
                    f"size {base} (a smaller domain, or spares and Kubernetes workers in it). Slurm keeps such "
                    f"a partial block, but places a job or a --segment in it only if that needs at most "
                    f"{block.nodes} node(s), and an aggregated block (BlockSizes) that holds it has fewer "
                    f"nodes than its size, so a job of that size does not fit there",
                )
            )
    slurm = plan.spec.partitions.slurm
    if slurm is not None:
        for i, part in enumerate(slurm.partitions):
            if part.grace_time:
                out.append(
                    Problem(
                        f"partitions.slurm.partitions[{i}].grace_time",
                        f"GraceTime={part.grace_time} on partition {part.name} only acts when a job is "
                        "preempted, and Slurm reads a partition's GraceTime only with "
                        "PreemptType=preempt/partition_prio, which railyard does not set: jobs that "
                        "reach their time limit get the --signal warning, OverTimeLimit and KillWait, "
                        "not GraceTime (docs/user-guide.md)",
                    )
                )
        if slurm.over_time_limit == "UNLIMITED":
            out.append(
                Problem(
                    "partitions.slurm.over_time_limit",
                    "OverTimeLimit=UNLIMITED: Slurm never cancels a job for running past its time "
                    "limit, so a job that ignores its checkpoint signal holds its nodes until it ends",
                )
            )
    nfs = plan.spec.storage.nfs
    if nfs is not None:
        for i, e in enumerate(nfs.exports):
            if "no_root_squash" in e.options:
                out.append(
                    Problem(
                        f"storage.nfs.exports[{i}].options",
                        f"{e.path} is exported with no_root_squash: root on any client is root on its files",
                    )
                )
    return out

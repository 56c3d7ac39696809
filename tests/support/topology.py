"""Expected scheduler topology, derived from the spec's YAML alone (a plain dict).

Expectations never come from a compiled Plan: a compiler bug would then be rendered,
loaded by slurmctld and "match" anyway. This module re-derives the groups from the rules
the spec documents (railyard/spec.py, DESIGN.md "The fabric model"), as plainly as it can:

* rail_optimized: every node reaches all rail leaves of its SU, so an SU is one leaf
  group. ``nodes`` + ``nodes_per_su`` cut the hostlist, in the order written, into su1,
  su2, ... Without a core tier all SUs sit under one group ``spine``; with one, every
  ``sus_per_group`` SUs in order form a pod (pod1, pod2, ...), all under one ``core``.
  NVLink ``domain_nodes`` cuts each SU in order into nvl1, nvl2, ... (numbered across SUs).
* explicit: switches of one tier that share something below them (a node, for leaves; a
  group of the tier below, for spines and cores) are one group, named by the ``group``
  their switches carry, else by the smallest switch name. Such a group is valid only if
  it carries at most one name, and if any two things below it share one of its switches
  (unless every switch carries that one name): a node cabled into two otherwise separate
  groups is refused.

Nothing here imports the compiler.
"""

from __future__ import annotations

from typing import Any

from ClusterShell.NodeSet import NodeSet

from railyard.drift.slurm import parse_topology

Topology = dict[str, tuple[int, frozenset[str], frozenset[str]]]
# level -> group name -> (every node under it, the groups one level down; empty for leaves)
Groups = dict[str, dict[str, tuple[frozenset[str], frozenset[str]]]]
# The same as lists, in order, so a name given twice is still seen twice.
Listed = dict[str, list[tuple[str, frozenset[str], frozenset[str]]]]

LEVELS_TOP_DOWN = ("core", "spine", "su", "nvlink")
TIER_LEVEL = {"leaf": "su", "spine": "spine", "core": "core"}
HOSTNAME_LABEL = "kubernetes.io/hostname"


class ConflictingGroups(ValueError):
    """The cabling makes one group of switches the spec names differently: no valid spec."""


def names(hostlist: str) -> list[str]:
    """Hostnames in the order written ("b[1-2],a1" -> b1, b2, a1)."""
    out: list[str] = []
    for part in _top_level_parts(hostlist):
        out.extend(NodeSet(part))
    return out


def _top_level_parts(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in [*parts, cur] if p.strip()]


def fabric_groups(spec: dict[str, Any]) -> Groups:
    """Every fabric group per level (su, spine, core, nvlink), with all its nodes."""
    return {
        lvl: {name: (nodes, kids) for name, nodes, kids in gs} for lvl, gs in _listed(spec).items()
    }


def group_names(spec: dict[str, Any]) -> list[str]:
    """The name of every group at every level, repeats kept: each must be unique, since each
    is one Slurm switch or block and one Volcano HyperNode."""
    return [name for gs in _listed(spec).values() for name, _, _ in gs]


def _listed(spec: dict[str, Any]) -> Listed:
    fabric = spec.get("fabric")
    if not fabric:
        return {}
    kind = "rail_optimized" if fabric.get("rail_optimized") else "explicit"
    groups, su_members = (_rail_optimized if kind == "rail_optimized" else _explicit)(fabric[kind])
    nvlink = fabric[kind].get("nvlink") or {}
    if nvlink.get("domain_nodes"):
        size = nvlink["domain_nodes"]
        doms = [m[i : i + size] for m in su_members for i in range(0, len(m), size)]
        groups["nvlink"] = [(f"nvl{i}", frozenset(d), frozenset()) for i, d in enumerate(doms, 1)]
    elif nvlink.get("domains"):
        groups["nvlink"] = [
            (d["name"], frozenset(names(d["nodes"])), frozenset()) for d in nvlink["domains"]
        ]
    return groups


def _rail_optimized(ro: dict[str, Any]) -> tuple[Listed, list[list[str]]]:
    """The groups, and each SU's nodes in the order written."""
    if ro.get("scalable_units"):
        sus = [(su["name"], names(su["nodes"])) for su in ro["scalable_units"]]
    else:
        flat, k = names(ro["nodes"]), ro["nodes_per_su"]
        sus = [(f"su{i // k + 1}", flat[i : i + k]) for i in range(0, len(flat), k)]
    groups: Listed = {"su": [(name, frozenset(m), frozenset()) for name, m in sus]}
    everything = frozenset(n for _, m in sus for n in m)
    core = ro.get("core")
    if core is None:
        groups["spine"] = [("spine", everything, frozenset(name for name, _ in sus))]
    else:
        per = core["sus_per_group"]
        pods = [sus[i : i + per] for i in range(0, len(sus), per)]
        groups["spine"] = [
            (f"pod{j}", frozenset(n for _, m in pod for n in m), frozenset(name for name, _ in pod))
            for j, pod in enumerate(pods, 1)
        ]
        groups["core"] = [
            ("core", everything, frozenset(f"pod{j}" for j in range(1, len(pods) + 1)))
        ]
    return groups, [m for _, m in sus]


def _explicit(ex: dict[str, Any]) -> tuple[Listed, list[list[str]]]:
    """The groups, and each leaf group's nodes in the order the links first name them."""
    tier = {s["name"]: s["tier"] for s in ex["switches"]}
    label = {s["name"]: s.get("group") for s in ex["switches"]}
    rank = {"leaf": 1, "spine": 2, "core": 3}
    up: dict[str, set[str]] = {}  # a node or switch -> the switches one tier above it
    for link in ex["links"]:
        lo, hi = sorted((link["a"], link["b"]), key=lambda end: rank.get(tier.get(end, ""), 0))
        up.setdefault(lo, set()).add(hi)
    # The units one level down: name -> (the nodes or switches it is made of, its nodes).
    units = {n: ({n}, [n]) for n in up if n not in tier}
    groups: Listed = {}
    su_members: list[list[str]] = []
    for t in ("leaf", "spine", "core"):
        here = [s for s in tier if tier[s] == t]
        if not here:
            break
        # Units and the tier-t switches they link to form a graph; a group is a component.
        root = {s: s for s in here}
        reach = {
            u: sorted({h for e in ends for h in up.get(e, ()) if tier.get(h) == t})
            for u, (ends, _) in units.items()
        }
        for above in reach.values():
            for h in above[1:]:
                root[_find(root, h)] = _find(root, above[0])
        level, new_units = TIER_LEVEL[t], {}
        groups[level] = []
        for r in dict.fromkeys(_find(root, s) for s in here):
            members = {s for s in here if _find(root, s) == r}
            labels = {label[s] for s in members if label[s]}
            if len(labels) > 1:  # cabling joins switches the spec gave two group names
                raise ConflictingGroups(f"switches {sorted(members)} carry groups {sorted(labels)}")
            named_all = len(labels) == 1 and all(label[s] for s in members)
            under = [set(reach[u]) for u in units if reach[u] and _find(root, reach[u][0]) == r]
            apart = [(x, y) for x in under for y in under if not x & y]
            if apart and not named_all:  # joined only through something cabled into both
                raise ConflictingGroups(f"switches {sorted(apart[0][0])} and {sorted(apart[0][1])} share nothing below")
            name = labels.pop() if labels else min(members)
            kids = [u for u in units if any(_find(root, h) == r for h in reach[u])]
            nodes = [n for k in kids for n in units[k][1]]
            kids_ = frozenset(kids) if t != "leaf" else frozenset()
            groups[level].append((name, frozenset(nodes), kids_))
            new_units[name] = (members, nodes)
            if t == "leaf":
                su_members.append(nodes)
        units = new_units
    return groups, su_members


def _find(root: dict[str, str], s: str) -> str:
    while root[s] != s:
        s = root[s]
    return s


# ---------------------------------------------------------------- per scheduler


def _slurm_nodes(spec: dict[str, Any]) -> set[str]:
    slurm = spec.get("partitions", {}).get("slurm") or {}
    return {n for p in slurm.get("partitions", []) for n in names(p["nodes"])}


def _workers(spec: dict[str, Any]) -> set[str]:
    k8s = spec.get("partitions", {}).get("kubernetes") or {}
    return set(names(k8s["workers"])) if k8s else set()


def expected_topology(spec: dict[str, Any]) -> Topology:
    """Slurm tree topology: switch -> (level, every node below it, child switches), the
    shape ``scontrol show topology`` reports. Groups without a Slurm node are left out."""
    groups, compute = fabric_groups(spec), _slurm_nodes(spec)
    out: Topology = {}
    for name, (nodes, _) in groups.get("su", {}).items():
        if nodes & compute:
            out[name] = (0, frozenset(nodes & compute), frozenset())
    for level in ("spine", "core"):
        for name, (_, kids) in groups.get(level, {}).items():
            kept = frozenset(k for k in kids if k in out)
            if kept:
                below = frozenset().union(*(out[k][1] for k in kept))
                out[name] = (1 + max(out[k][0] for k in kept), below, kept)
    return out


def expected_blocks(spec: dict[str, Any]) -> dict[str, frozenset[str]]:
    """Slurm topology/block: NVLink domain -> its Slurm nodes (domains without any left out)."""
    compute = _slurm_nodes(spec)
    doms = fabric_groups(spec).get("nvlink", {})
    return {name: nodes & compute for name, (nodes, _) in doms.items() if nodes & compute}


def block_su(spec: dict[str, Any]) -> dict[str, str]:
    """Slurm block (NVLink domain with Slurm nodes) -> the SU it sits in."""
    sus = fabric_groups(spec)["su"]
    return {b: next(su for su, (nodes, _) in sus.items() if nodes & members)
            for b, members in expected_blocks(spec).items()}


def blocks_per_su(spec: dict[str, Any]) -> list[int]:
    """How many Slurm blocks each SU holds, SUs in fabric order, those without any left out."""
    where = block_su(spec)
    return [n for n in (list(where.values()).count(su) for su in fabric_groups(spec)["su"]) if n]


def expected_block_sizes(spec: dict[str, Any]) -> tuple[int, ...]:
    """BlockSizes: the spec's, else the base block (the most Slurm nodes in one domain)
    doubled while 2^j blocks still fit in an SU and every SU but the last holds a multiple
    of 2^j blocks: Slurm joins 2^j consecutive blocks, which must not reach into the next SU."""
    fabric = spec["fabric"]
    nvlink = (fabric.get("rail_optimized") or fabric.get("explicit"))["nvlink"]
    if nvlink.get("block_sizes"):
        return tuple(nvlink["block_sizes"])
    base = max(len(members) for members in expected_blocks(spec).values())
    counts = blocks_per_su(spec)
    sizes, step = [base], 2
    while step <= max(counts) and all(sum(counts[: i + 1]) % step == 0 for i in range(len(counts) - 1)):
        sizes.append(base * step)
        step *= 2
    return tuple(sizes)


def expected_labels(spec: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Kueue Topology levels (top down, hostname last) and every worker's level labels."""
    prefix = spec["partitions"]["kubernetes"].get("label_prefix", "topology.railyard.dev")
    groups = fabric_groups(spec)
    levels = [lvl for lvl in LEVELS_TOP_DOWN if lvl in groups]
    labels: dict[str, dict[str, str]] = {w: {} for w in _workers(spec)}
    for lvl in levels:
        for name, (nodes, _) in groups[lvl].items():
            for n in nodes & labels.keys():
                labels[n][f"{prefix}/{lvl}"] = name
    return [f"{prefix}/{lvl}" for lvl in levels] + [HOSTNAME_LABEL], labels


def expected_hypernodes(spec: dict[str, Any]) -> dict[int, dict[str, frozenset[str]]]:
    """Volcano tier -> HyperNode -> the workers under it; tier 1 is the finest level."""
    groups, workers = fabric_groups(spec), _workers(spec)
    levels = [lvl for lvl in reversed(LEVELS_TOP_DOWN) if lvl in groups]
    return {
        tier: {name: nodes & workers for name, (nodes, _) in groups[lvl].items() if nodes & workers}
        for tier, lvl in enumerate(levels, 1)
    }


def observed_topology(scontrol_output: str) -> Topology:
    """`scontrol show topology` text in the same shape."""
    switches, _blocks = parse_topology(scontrol_output)
    return {s.name: (s.level, frozenset(s.nodes), frozenset(s.switches)) for s in switches}


def hypernode_nodes(docs: list[dict[str, Any]], tier: int) -> dict[str, set[str]]:
    """HyperNode -> the nodes under it, for the compiled HyperNodes (``kubernetes/volcano.yaml``)
    of *tier* (tier 1 names nodes; higher tiers name the HyperNodes below them)."""
    hn = {d["metadata"]["name"]: d["spec"] for d in docs if d.get("kind") == "HyperNode"}

    def nodes(name: str) -> set[str]:
        out: set[str] = set()
        for m in hn[name]["members"]:
            ref = m["selector"]["exactMatch"]["name"]
            out |= {ref} if m["type"] == "Node" else nodes(ref)
        return out

    return {name: nodes(name) for name, spec in hn.items() if spec["tier"] == tier}

"""The fabric graph and the scheduler hierarchy derived from it.

Both fabric kinds become one graph of switches and links. The hierarchy that Slurm,
Kubernetes, Kueue and Volcano see is then derived from the graph alone:

* leaf tier: leaves that share a node are one group. In a rail-optimized fabric every
  node reaches all rail leaves of its SU, so the rails of an SU collapse into one group
  (the SU) by construction, and every node sits under exactly one group.
* spine tier: spines reached from the same leaf group are one group (one spine plane in a
  two-tier fabric, one pod per spine group when there is a core tier).
* core tier: likewise, core switches reached from the same spine group.

NVLink domains are a second grouping, inside the leaf groups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

from railyard.compiler.nodes import Node, hostlist_field
from railyard.errors import Problem
from railyard.spec import Cluster, Explicit, RailOptimized

TIERS = ("leaf", "spine", "core")
# The name each tier's groups carry as a scheduler level (a label key, a HyperNode tier).
LEVEL_OF_TIER = {"leaf": "su", "spine": "spine", "core": "core"}
# What each level's groups are called in errors.
LEVEL_WORDS = {"su": "SU", "spine": "spine group", "core": "core group", "nvlink": "NVLink domain"}


@dataclass(frozen=True, slots=True)
class FabricSwitch:
    name: str
    tier: str
    radix: int
    group: str | None
    radix_path: str  # spec path of the radix that limits this switch, for errors
    # Spec paths where the user wrote this switch's group name and its own name (explicit
    # fabrics, listed SUs); None where railyard made the name up (spine, pod1, core, su1).
    group_path: str | None = None
    name_path: str | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """A logical switch for the schedulers: an SU, a spine plane or pod, the core, an NVLink domain."""

    name: str
    level: str  # su | spine | core | nvlink
    nodes: tuple[str, ...]
    children: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Links:
    """Every lower end cabled to every upper end, ``count`` cables each.

    An explicit fabric has one per link of the spec (one end each side). A rail-optimized
    one has one per SU (its nodes to its rail leaves), per pod (its leaves to its spines)
    and per pod's spines to the core: a 70,000-node fabric is a few thousand of these, not
    a tuple per cable (1.1 million of them)."""

    lower: tuple[str, ...]
    upper: tuple[str, ...]
    count: int = 1

    @property
    def total(self) -> int:
        """Cables in all: each pair of ends, ``count`` times."""
        return len(self.lower) * len(self.upper) * self.count


@dataclass(frozen=True)
class Fabric:
    link_speed: str
    switches: tuple[FabricSwitch, ...]
    links: tuple[Links, ...]
    levels: tuple[str, ...]  # top to bottom, e.g. ("spine", "su", "nvlink")
    groups: dict[str, tuple[Group, ...]] = field(default_factory=dict)  # level -> groups in order

    def level_of(self) -> dict[str, dict[str, str]]:
        """node -> {level: group name}."""
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for level, groups in self.groups.items():
            for group in groups:
                for node in group.nodes:
                    out[node][level] = group.name
        return out

    @property
    def nodes(self) -> tuple[str, ...]:
        sus = self.groups.get("su", ())
        return tuple(n for g in sus for n in g.nodes)

    def cables(self) -> Iterator[tuple[str, str, int]]:
        """(lower end, upper end, parallel cables) for each pair of ends cabled together."""
        for links in self.links:
            for lower in links.lower:
                for upper in links.upper:
                    yield lower, upper, links.count


# ---------------------------------------------------------------- graph generation


def _rail_optimized(
    spec: RailOptimized, nodes: dict[str, Node], problems: list[Problem]
) -> tuple[list[FabricSwitch], list[Links], list[tuple[str, list[str]]]]:
    base = "fabric.rail_optimized"
    sus: list[tuple[str, list[str]]] = []
    if spec.scalable_units is not None:
        for i, su in enumerate(spec.scalable_units):
            sus.append((su.name, hostlist_field(su.nodes, f"{base}.scalable_units[{i}].nodes", nodes, problems)))
    else:
        assert spec.nodes is not None and spec.nodes_per_su is not None
        flat = hostlist_field(spec.nodes, f"{base}.nodes", nodes, problems)
        step = spec.nodes_per_su
        sus = [(f"su{i // step + 1}", flat[i : i + step]) for i in range(0, len(flat), step)]

    first: dict[str, int] = {}
    for i, (su, _members) in enumerate(sus):
        if su in first:
            problems.append(
                Problem(
                    f"{base}.scalable_units[{i}].name",
                    f"SU name '{su}' is already used by scalable_units[{first[su]}]; "
                    "give every SU its own name",
                )
            )
        first.setdefault(su, i)
    seen: dict[str, str] = {}
    for i, (su, members) in enumerate(sus):
        for name in members:
            if name in seen:
                problems.append(
                    Problem(
                        f"{base}.scalable_units[{i}].nodes",
                        f"{name} is in SU {seen[name]} and SU {su}; a node sits in one SU (its "
                        f"rails are cabled to that SU's leaves): remove it from one of the two",
                    )
                )
            seen.setdefault(name, su)
    switches: list[FabricSwitch] = []
    links: list[Links] = []
    listed = spec.scalable_units is not None
    rail_leaves: list[tuple[str, ...]] = []  # per SU, its leaf per rail
    for i, (su, members) in enumerate(sus):
        su_path = f"{base}.scalable_units[{i}].name" if listed else None
        rail_leaves.append(tuple(f"{su}-rail{rail}" for rail in range(spec.rails)))
        switches.extend(
            FabricSwitch(leaf, "leaf", spec.leaf_radix, su, f"{base}.leaf_radix", su_path) for leaf in rail_leaves[-1]
        )
        links.append(Links(tuple(members), rail_leaves[-1]))

    spine_path = f"{base}.spines.radix"
    uplinks = spec.spines.links_per_leaf
    if spec.core is None:
        spines = tuple(f"spine{k}" for k in range(1, spec.spines.count + 1))
        switches.extend(FabricSwitch(s, "spine", spec.spines.radix, "spine", spine_path) for s in spines)
        links.append(Links(tuple(chain.from_iterable(rail_leaves)), spines, uplinks))
    else:
        per = spec.core.sus_per_group
        cores = tuple(f"core{k}" for k in range(1, spec.core.count + 1))
        switches.extend(
            FabricSwitch(c, "core", spec.core.radix, "core", f"{base}.core.radix") for c in cores
        )
        for p in range(0, len(sus), per):
            pod = f"pod{p // per + 1}"
            spines = tuple(f"{pod}-spine{k}" for k in range(1, spec.spines.count + 1))
            switches.extend(FabricSwitch(s, "spine", spec.spines.radix, pod, spine_path) for s in spines)
            links.append(Links(tuple(chain.from_iterable(rail_leaves[p : p + per])), spines, uplinks))
            links.append(Links(spines, cores, spec.core.links_per_spine))

    for su, members in sus:
        for name in members:
            node = nodes[name]
            if node.hardware.nics != spec.rails:
                problems.append(
                    Problem(
                        f"nodes[{node.group_index}].hardware.nics",
                        f"{name} has {node.hardware.nics} fabric NICs but the fabric has "
                        f"{spec.rails} rails; set hardware.nics: {spec.rails} or "
                        f"fabric.rail_optimized.rails: {node.hardware.nics}",
                    )
                )
                break
    return switches, links, sus


def _explicit(
    spec: Explicit, nodes: dict[str, Node], problems: list[Problem]
) -> tuple[list[FabricSwitch], list[Links]]:
    base = "fabric.explicit"
    switches: list[FabricSwitch] = []
    tier_of: dict[str, str] = {}
    for i, sw in enumerate(spec.switches):
        if sw.name in tier_of or sw.name in nodes:
            problems.append(
                Problem(f"{base}.switches[{i}].name", f"'{sw.name}' is already a switch or node name; rename it")
            )
            continue
        tier_of[sw.name] = sw.tier
        path = f"{base}.switches[{i}]"
        switches.append(
            FabricSwitch(
                sw.name,
                sw.tier,
                sw.radix,
                sw.group,
                f"{path}.radix",
                f"{path}.group" if sw.group else None,
                f"{path}.name",
            )
        )

    order = {"node": 0, "leaf": 1, "spine": 2, "core": 3}
    links: list[Links] = []
    nic_count: dict[str, int] = defaultdict(int)
    for i, link in enumerate(spec.links):
        ends = []
        for end in (link.a, link.b):
            if end in nodes:
                ends.append((end, "node"))
            elif end in tier_of:
                ends.append((end, tier_of[end]))
            else:
                problems.append(
                    Problem(f"{base}.links[{i}]", f"'{end}' is neither a node nor a switch; add it or fix the name")
                )
        if len(ends) != 2:
            continue
        lo, hi = sorted(ends, key=lambda e: order[e[1]])
        if order[hi[1]] - order[lo[1]] != 1:
            problems.append(
                Problem(
                    f"{base}.links[{i}]",
                    f"a link from {lo[1]} {lo[0]} to {hi[1]} {hi[0]} skips or repeats a tier; "
                    "links go node-leaf, leaf-spine or spine-core",
                )
            )
            continue
        if lo[1] == "node":
            nic_count[lo[0]] += link.count
        links.append(Links((lo[0],), (hi[0],), link.count))

    for name, count in nic_count.items():
        node = nodes[name]
        if count != node.hardware.nics:
            problems.append(
                Problem(
                    f"nodes[{node.group_index}].hardware.nics",
                    f"{name} has {node.hardware.nics} fabric NICs but {count} links in "
                    f"fabric.explicit.links; cable every NIC once or fix hardware.nics",
                )
            )
    return switches, links


# ---------------------------------------------------------------- checks and hierarchy


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, items: Sequence[str]) -> None:
        if not items:
            return
        root = self.find(items[0])
        for other in items[1:]:
            r = self.find(other)
            if r != root:
                self.parent[r] = root


def _check_ports(switches: list[FabricSwitch], links: list[Links], problems: list[Problem]) -> None:
    used: dict[str, int] = defaultdict(int)
    down: dict[str, int] = defaultdict(int)
    for bundle in links:
        per_lower = bundle.count * len(bundle.upper)  # each lower end's cables up
        per_upper = bundle.count * len(bundle.lower)  # each upper end's cables down
        for lo in bundle.lower:
            used[lo] += per_lower
        for hi in bundle.upper:
            used[hi] += per_upper
            down[hi] += per_upper
    over: dict[str, list[FabricSwitch]] = defaultdict(list)
    for sw in switches:
        if used[sw.name] > sw.radix:
            over[sw.radix_path].append(sw)
    for path, sws in over.items():
        sw = sws[0]
        more = f" (and {len(sws) - 1} more like it)" if len(sws) > 1 else ""
        problems.append(
            Problem(
                path,
                f"{sw.tier} {sw.name}{more} needs {used[sw.name]} ports ({down[sw.name]} down, "
                f"{used[sw.name] - down[sw.name]} up) but has {sw.radix}; raise the radix, "
                "use fewer or thinner uplinks, or put fewer nodes under it",
            )
        )


def _derive_groups(
    switches: list[FabricSwitch],
    links: list[Links],
    problems: list[Problem],
    base: str,
    origin: dict[tuple[str, str], list[str | None]],
    link_paths: dict[tuple[str, str], str] | None = None,
) -> tuple[dict[str, list[Group]], dict[str, str]]:
    """Groups per tier, and the group each switch belongs to.

    ``origin`` receives, per (level, group name), the spec paths where the user wrote that
    name (None where railyard made it up), one per group: name clashes are reported there.
    ``link_paths`` gives the spec path of each (lower end, upper end) link, for errors."""
    tier_of = {s.name: s.tier for s in switches}
    label = {s.name: s.group for s in switches}
    by_name = {s.name: s for s in switches}
    index = {s.name: i for i, s in enumerate(switches)}  # groups come in switch order
    # lower end -> the upper ends it is cabled to, in link order: in a rail-optimized fabric
    # the tuple of its SU's leaves itself, shared by all the SU's nodes
    uppers: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for bundle in links:
        for lo in bundle.lower:
            uppers[lo].append(bundle.upper)
    up = {lo: ends[0] if len(ends) == 1 else tuple(chain.from_iterable(ends)) for lo, ends in uppers.items()}

    groups: dict[str, list[Group]] = {}
    group_of: dict[str, str] = {}
    # Members of the tier below, as groups: for the leaf tier, the nodes themselves.
    # (name, members in the tier below, nodes), in the order links first name them, as ``up`` does
    below: list[tuple[str, list[str], tuple[str, ...]]] = [(n, [n], (n,)) for n in up if n not in tier_of]

    for tier in TIERS:
        tier_switches = [s.name for s in switches if s.tier == tier]
        if not tier_switches:
            break
        uf = _UnionFind()
        for s in tier_switches:
            uf.find(s)
        # the switches of this tier each member of the tier below reaches, each once; worked
        # out once per distinct tuple of upper ends (the 32 nodes of an SU share one)
        reach_of: dict[tuple[str, ...], tuple[str, ...]] = {}
        reached: list[tuple[str, ...]] = []
        for _name, members, _nodes in below:
            ends = up.get(members[0], ()) if len(members) == 1 else tuple(chain.from_iterable(up.get(m, ()) for m in members))
            if ends not in reach_of:
                reach_of[ends] = tuple(dict.fromkeys(hi for hi in ends if tier_of.get(hi) == tier))
            reached.append(reach_of[ends])
        # Units that reach the same switches (the 32 nodes of an SU, say) join them once.
        for same in dict.fromkeys(reached):
            uf.union(same)
        comps: dict[str, list[str]] = defaultdict(list)
        for s in tier_switches:
            comps[uf.find(s)].append(s)
        # children (below-groups) and nodes per component, in the order first reached
        children: dict[str, list[str]] = defaultdict(list)
        nodes: dict[str, list[str]] = defaultdict(list)
        reaches: dict[str, list[tuple[str, list[str], tuple[str, ...]]]] = defaultdict(list)  # (unit, its ends, reach)
        orphans = []
        for (name, lower, member_nodes), reach in zip(below, reached, strict=True):
            if not reach:
                orphans.append(name)
                continue
            root = uf.find(reach[0])  # union() made everything it reaches one component
            children[root].append(name)
            nodes[root].extend(member_nodes)
            reaches[root].append((name, lower, reach))
        if orphans:
            what = "nodes" if tier == "leaf" else f"{LEVEL_OF_TIER[TIERS[TIERS.index(tier) - 1]]} groups"
            problems.append(
                Problem(base, f"{what} {', '.join(orphans[:5])} reach no {tier} switch; cable them or remove the {tier} tier")
            )
        level = LEVEL_OF_TIER[tier]
        tier_groups = []
        for root in sorted(comps, key=lambda r: min(index[m] for m in comps[r])):
            members = comps[root]
            labels = sorted({label[m] for m in members if label[m]})
            if len(labels) > 1:
                problems.append(_merged(tier, members, labels, below, up, by_name))
            elif not (labels and all(label[m] == labels[0] for m in members)):
                bridge = _bridged(tier, reaches[root], by_name, link_paths or {}, base)
                if bridge is not None:
                    problems.append(bridge)
            if labels:
                name = labels[0]
                path = next(by_name[m].group_path for m in members if label[m] == name)
            else:
                name = min(members)
                path = by_name[name].name_path
            origin.setdefault((level, name), []).append(path)
            for m in members:
                group_of[m] = name
            tier_groups.append(
                Group(
                    name,
                    level,
                    tuple(nodes[root]),
                    tuple(group_of.get(c, c) for c in children[root]) if tier != "leaf" else (),
                    tuple(members),
                )
            )
        empty = [g.name for g in tier_groups if not g.nodes]
        if empty:
            problems.append(Problem(base, f"{tier} switches of {', '.join(empty)} reach no node; cable them or remove them"))
        groups[level] = tier_groups
        below = [(g.name, list(g.switches), g.nodes) for g in tier_groups]

    top = list(groups)[-1] if groups else None
    if top and len(groups[top]) > 1:
        names = ", ".join(g.name for g in groups[top])
        problems.append(
            Problem(
                base,
                f"the fabric falls apart into {len(groups[top])} parts at the top ({names}); jobs could "
                "never span them: connect them through a higher tier",
            )
        )
    return groups, group_of


def _merged(
    tier: str,
    members: list[str],
    labels: list[str],
    below: list[tuple[str, list[str], tuple[str, ...]]],
    up: dict[str, tuple[str, ...]],
    by_name: dict[str, FabricSwitch],
) -> Problem:
    """Switches that carry two group names but are one group: refuse, never merge silently."""
    mine = set(members)
    first = {lab: next(m for m in members if by_name[m].group == lab) for lab in labels}
    a, b = first[labels[0]], first[labels[1]]
    witnesses = []
    for name, lower, _nodes in below:
        reached = {by_name[h].group for m in lower for h in up.get(m, ()) if h in mine}
        if len(reached - {None}) > 1:
            witnesses.append(name)
    what = "node" if tier == "leaf" else LEVEL_WORDS[LEVEL_OF_TIER[TIERS[TIERS.index(tier) - 1]]]
    level = LEVEL_WORDS[LEVEL_OF_TIER[tier]]
    if witnesses:
        many = len(witnesses) > 1
        who = f"{what}{'s' if many else ''} {', '.join(witnesses[:3])}"
        why = f"{who} {'are' if many else 'is'} cabled to both"
        fix = f"cable {witnesses[0]} to {tier} switches of one group only"
    else:
        why = f"what is cabled below them joins them ({what}s reach switches of both)"
        fix = "cable each group's members to switches of that group only"
    return Problem(
        by_name[b].group_path or by_name[b].name_path or "fabric",
        f"{tier} switches {a} (group '{labels[0]}') and {b} (group '{labels[1]}') are one "
        f"{level}: {why}; {'an' if what == 'SU' else 'a'} {what} sits under exactly one "
        f"{level}, so {fix}, or give these switches one group name",
    )


def _bridged(
    tier: str,
    units: list[tuple[str, list[str], tuple[str, ...]]],
    by_name: dict[str, FabricSwitch],
    link_paths: dict[tuple[str, str], str],
    base: str,
) -> Problem | None:
    """One group only because a node (or lower group) is cabled into two: refuse it.

    In a group made by design (the rails of an SU, the spines of a plane) any two members
    of the tier below share a switch of the group. Two that share none are in one group
    only through something cabled into both sides, and railyard would merge the two sides
    silently. A user who means one group says so by giving all its switches one name."""
    sets: dict[frozenset[str], list[str]] = {}
    ends_of: dict[str, list[str]] = {}
    for name, lower, reach in units:
        sets.setdefault(frozenset(reach), []).append(name)
        ends_of[name] = lower
    if len(sets) < 2:
        return None
    # The two sides: a pair of disjoint sets, the best-supported first, preferring a pair
    # that one set (the bridge) meets on both sides. Bit i stands for ranked[i], so a
    # hostile spec of many distinct sets costs big-int ORs, not a Python loop per pair.
    ranked = sorted(sets, key=lambda s: -len(sets[s]))
    holders: dict[str, int] = defaultdict(int)  # switch -> the sets that hold it
    for i, s in enumerate(ranked):
        for sw in s:
            holders[sw] |= 1 << i
    everything = (1 << len(ranked)) - 1
    if any(mask == everything for mask in holders.values()):
        return None  # one switch under all of them: one group by design
    meets: dict[int, int] = {}

    def meet(i: int) -> int:  # the sets that share a switch with ranked[i]
        if i not in meets:
            mask = 0
            for sw in ranked[i]:
                mask |= holders[sw]
            meets[i] = mask
        return meets[i]

    first_pair = None
    found = None
    tries = 0
    for i in range(len(ranked)):
        apart = everything & ~meet(i) & ~((1 << (i + 1)) - 1)  # later sets sharing nothing with it
        while apart and found is None and tries < 10_000:
            j = (apart & -apart).bit_length() - 1
            apart &= apart - 1
            tries += 1
            first_pair = first_pair or (ranked[i], ranked[j])
            bridges = meet(i) & meet(j)
            if bridges:  # the fewest members hold the last (ranked by support)
                found = (ranked[i], ranked[j], ranked[bridges.bit_length() - 1])
        if found is not None or tries >= 10_000:
            break
    if first_pair is None:
        return None
    lower = "node" if tier == "leaf" else LEVEL_WORDS[LEVEL_OF_TIER[TIERS[TIERS.index(tier) - 1]]]
    level = LEVEL_WORDS[LEVEL_OF_TIER[tier]]
    article = "an" if lower == "SU" else "a"
    fix = (f"{article} {lower} sits under exactly one {level}: cable each {lower} to {tier} switches of one "
           f"group only, or, if these switches are one {level}, give all of them one group name")
    if found is None:  # joined through a chain: name two that share nothing
        a, b = first_pair
        return Problem(
            base,
            f"{lower}s {sets[a][0]} and {sets[b][0]} share no {tier} switch ({', '.join(sorted(a))}; "
            f"{', '.join(sorted(b))}), yet the cabling of other {lower}s makes one {level} of them; {fix}",
        )
    a, b, bridge = found
    first = list(sets)  # in the order the links name them
    a, b = sorted((a, b), key=first.index)
    who = sets[bridge]

    def shown(side: frozenset[str]) -> tuple[list[str], str]:
        switches = sorted(bridge & side)
        others = [m for s, ms in sets.items() if s != bridge and s & side and s <= side for m in ms]
        labels = sorted({by_name[s].group for s in switches if by_name[s].group})
        named = f"group '{labels[0]}', " if len(labels) == 1 else ""
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        return switches, f"{', '.join(switches)} ({named}with {', '.join(others[:3])}{more})"

    (sw_a, text_a), (sw_b, text_b) = shown(a), shown(b)
    # The cable to fix: into the side where the bridge has fewer switches (ties: the side
    # the links name later).
    wrong = sw_a if len(sw_a) < len(sw_b) else sw_b
    path = next((link_paths[(e, s)] for s in wrong for e in ends_of[who[0]] if (e, s) in link_paths), base)
    also = f" (and {', '.join(who[1:3])}{' and more' if len(who) > 3 else ''} likewise)" if len(who) > 1 else ""
    return Problem(
        path,
        f"{lower} {who[0]}{also} is cabled to {tier} switches of 2 groups: {text_a} and {text_b}; the "
        f"cabling would merge them into one {level}, but {fix.replace('each ' + lower, who[0])}",
    )


def _unique_names(
    groups: dict[str, list[Group]],
    origin: dict[tuple[str, str], list[str | None]],
    problems: list[Problem],
) -> None:
    """Every group name is one Slurm switch/block and one Volcano HyperNode: refuse a clash.

    Slurm stops on a switch defined twice ("Switch ... has already been defined"), and an
    SU named like the spine group above it would be a HyperNode that contains itself.
    """
    seen: dict[str, tuple[str, str | None]] = {}
    for level in ("su", "spine", "core", "nvlink"):
        paths = {key: list(value) for key, value in origin.items() if key[0] == level}
        for g in groups.get(level, ()):
            here = (level, (paths.get((level, g.name)) or [None]).pop(0))
            if g.name not in seen:
                seen[g.name] = here
                continue
            first = seen[g.name]
            user = [at for at in (here, first) if at[1]]
            fix = f"the {LEVEL_WORDS[user[0][0]]}" if len(user) == 1 else "one of them"
            problems.append(
                Problem(
                    user[0][1] if user else "fabric",
                    f"'{g.name}' names both {_describe(first, g.name)} and "
                    f"{_describe(here, g.name)}; every SU, spine "
                    "group, pod, core group and NVLink domain becomes a Slurm switch or block "
                    "and a Volcano HyperNode of that name, so the names must differ: "
                    f"rename {fix}",
                )
            )


def _describe(at: tuple[str, str | None], name: str) -> str:
    level, path = at
    if path:
        return f"the {LEVEL_WORDS[level]} at {path}"
    return f"the {LEVEL_WORDS[level]} railyard names '{name}'"


def _nvlink(
    cluster: Cluster,
    sus: list[Group],
    nodes: dict[str, Node],
    problems: list[Problem],
    origin: dict[tuple[str, str], list[str | None]],
) -> list[Group]:
    fab = cluster.fabric
    assert fab is not None
    kind = "rail_optimized" if fab.rail_optimized else "explicit"
    spec = (fab.rail_optimized or fab.explicit).nvlink  # type: ignore[union-attr]
    if spec is None:
        return []
    base = f"fabric.{kind}.nvlink"
    domains: list[Group] = []
    if spec.domain_nodes is not None and spec.domains is not None:
        problems.append(Problem(base, "give either 'domain_nodes' or 'domains', not both"))
        return []
    if spec.domain_nodes is not None:
        size = spec.domain_nodes
        for su in sus:
            if len(su.nodes) % size:
                problems.append(
                    Problem(
                        f"{base}.domain_nodes",
                        f"NVLink domains of {size} nodes do not tile SU {su.name} ({len(su.nodes)} nodes); "
                        f"make each SU a multiple of {size} nodes or fix domain_nodes",
                    )
                )
                return []
            for i in range(0, len(su.nodes), size):
                domains.append(Group(f"nvl{len(domains) + 1}", "nvlink", su.nodes[i : i + size]))
                origin.setdefault(("nvlink", domains[-1].name), []).append(None)
    elif spec.domains is not None:
        su_of = {n: su.name for su in sus for n in su.nodes}
        seen: dict[str, str] = {}
        for i, dom in enumerate(spec.domains):
            members = hostlist_field(dom.nodes, f"{base}.domains[{i}].nodes", nodes, problems)
            for n in members:
                if n in seen:
                    problems.append(Problem(f"{base}.domains[{i}].nodes", f"{n} is also in NVLink domain {seen[n]}; a node is in one domain"))
                seen[n] = dom.name
            off = [n for n in members if n not in su_of]
            if off:
                problems.append(
                    Problem(
                        f"{base}.domains[{i}].nodes",
                        f"{', '.join(off[:5])} of NVLink domain {dom.name} are on no fabric leaf; "
                        "cable them or take them out of the domain",
                    )
                )
            owners = sorted({su_of[n] for n in members if n in su_of})
            if len(owners) > 1:
                problems.append(
                    Problem(
                        f"{base}.domains[{i}].nodes",
                        f"NVLink domain {dom.name} spans SUs {', '.join(owners)}; "
                        "a domain must sit inside one SU",
                    )
                )
            domains.append(Group(dom.name, "nvlink", tuple(members)))
            origin.setdefault(("nvlink", dom.name), []).append(f"{base}.domains[{i}].name")
        outside = [n for n in su_of if n not in seen]
        if outside:
            problems.append(
                Problem(
                    f"{base}.domains",
                    f"{', '.join(outside[:5])}{' and more' if len(outside) > 5 else ''} are on the "
                    "fabric but in no NVLink domain; with domains, every fabric node sits in "
                    "exactly one (a node outside every domain would have no NVLink label for "
                    "Kueue and sit in no HyperNode for Volcano): add them to a domain (a "
                    f"one-node domain is fine) or drop {base}",
                )
            )
    else:
        problems.append(Problem(base, "give 'domain_nodes' (rail-optimized) or 'domains' (explicit)"))
        return []
    return domains


def build_fabric(cluster: Cluster, nodes: list[Node]) -> tuple[Fabric | None, list[Problem]]:
    problems: list[Problem] = []
    fab = cluster.fabric
    if fab is None:
        return None, problems
    by_name = {n.name: n for n in nodes}
    if fab.rail_optimized is not None:
        switches, links, _sus = _rail_optimized(fab.rail_optimized, by_name, problems)
        base = "fabric.rail_optimized"
    else:
        assert fab.explicit is not None
        switches, links = _explicit(fab.explicit, by_name, problems)
        base = "fabric.explicit"
    _check_ports(switches, links, problems)
    origin: dict[tuple[str, str], list[str | None]] = {}
    link_paths: dict[tuple[str, str], str] = {}
    if fab.explicit is not None:
        for i, link in enumerate(fab.explicit.links):
            link_paths.setdefault((link.a, link.b), f"{base}.links[{i}]")
            link_paths.setdefault((link.b, link.a), f"{base}.links[{i}]")
    groups, _group_of = _derive_groups(switches, links, problems, base, origin, link_paths)
    sus = groups.get("su", [])
    domains = _nvlink(cluster, sus, by_name, problems, origin)
    if domains:
        groups["nvlink"] = domains
    _unique_names(groups, origin, problems)
    levels = tuple(reversed([lvl for lvl in ("su", "spine", "core") if lvl in groups]))
    if domains:
        levels += ("nvlink",)
    return (
        Fabric(
            link_speed=fab.link_speed,
            switches=tuple(switches),
            links=tuple(links),
            levels=levels,
            groups={k: tuple(v) for k, v in groups.items()},
        ),
        problems,
    )

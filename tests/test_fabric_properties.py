"""Property-based tests: random valid fabrics, compiled, rendered, checked against the spec.

Hypothesis draws fabrics in both forms, rail-optimized (listed or cut SUs, optional core,
NVLink domains tiling each SU) and explicit (switches and links; uneven SUs, pods and
domains; user-chosen group names on some, all or none of the switches, shuffled order).
Expectations come from tests/support/topology.py, which derives the groups from the spec
dict without the compiler. Checked for every fabric:

* a real slurmctld (Debian 12's 22.05: tree topology only) loads the rendered
  topology.conf and ``scontrol show topology`` is exactly the derived tree;
* block topology (NVLink domains) cannot load on 22.05, so at 25.05 the rendered
  BlockName/BlockSizes lines are compared with the derivation, without slurmctld, and no
  aggregated block Slurm would form from them spans two SUs; at 24.11 a spec whose
  domains give Slurm fewer nodes than the base block (24.11's slurmctld stops on it) is
  refused, and only such a spec;
* the Kueue Topology's levels nest and every worker has a label at every level;
* every Volcano HyperNode has exactly one parent (the top tier none), and no name repeats;
* names that clash across levels, and cabling that joins two groups, are refused, and only
  those.

CI runs a bounded, derandomized, database-less profile (reproducible, ~20 slurmctld starts).
Benchmark: ``RAILYARD_HYPOTHESIS_EXAMPLES=500 pytest tests/test_fabric_properties.py`` runs
500 fresh random examples of every property (the time limits grow with it; ~4.5 min on the
shared 2-core host, about 0.33 s per slurmctld-backed example).
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import pytest
import yaml
from ClusterShell.NodeSet import NodeSet
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

from railyard.errors import SpecError
from railyard.load import loads_plan
from railyard.render import render, write
from tests.support.slurmhost import SlurmHost, slurm_missing_reason
from tests.support.topology import (
    LEVELS_TOP_DOWN,
    ConflictingGroups,
    block_su,
    expected_block_sizes,
    expected_blocks,
    expected_hypernodes,
    expected_labels,
    expected_topology,
    fabric_groups,
    group_names,
    hypernode_nodes,
)

BENCH = int(os.environ.get("RAILYARD_HYPOTHESIS_EXAMPLES", "0"))
LIVE_EXAMPLES = BENCH or 20  # each starts a slurmctld (~0.3-3 s on a busy 2-core host)
PURE_EXAMPLES = BENCH or 150
# A passing CI run takes ~5-10 s per test. The limits leave room for Hypothesis's own cap
# of 300 s on shrinking a failure, so a failure is reported with its smallest example
# instead of being cut off by pytest-timeout mid-shrink.
LIVE_TIMEOUT = max(600, LIVE_EXAMPLES * 6)
PURE_TIMEOUT = max(600, PURE_EXAMPLES)


def _settings(examples: int) -> settings:
    # CI: derandomized, no database, so every run and machine draws the same examples. The
    # benchmark run (RAILYARD_HYPOTHESIS_EXAMPLES) draws fresh ones; a failure prints the blob
    # to replay it with @reproduce_failure.
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=not BENCH,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        print_blob=True,
    )


# Names a user might pick, including every name railyard makes up for the upper tiers.
TRICKY = ["spine", "core", "pod1", "pod2", "nvl1", "nvl2", "su1", "su2", "leaf", "rack-a"]
GROUP_NAME = st.sampled_from(TRICKY) | st.from_regex(r"[a-z]([a-z0-9-]{0,5}[a-z0-9])?", fullmatch=True)
RESERVED = re.compile(r"^(spine|core|pod\d+|nvl\d+)$")


# ---------------------------------------------------------------- the spec around a fabric


def _spec(fabric: dict[str, Any], nodes: list[str], slurm_mask: list[bool], rails: int) -> dict:
    slurm = [n for n, s in zip(nodes, slurm_mask, strict=True) if s]
    workers = [n for n, s in zip(nodes, slurm_mask, strict=True) if not s]
    hw = {
        "sockets": 1,
        "cores_per_socket": 2,
        "memory_mb": 1000,
        "nics": rails,
        "gpus": {"type": "h100", "count": 1},
    }
    small = {"sockets": 1, "cores_per_socket": 2, "memory_mb": 1000}
    spec: dict[str, Any] = {
        "cluster": {"name": "prop", "domain": "prop.example.com", "versions": {"slurm": "22.05"}},
        "network": {"management": {"cidr": "10.0.0.0/16"}},
        "nodes": [
            {"group": "ctl", "names": "ctl1", "hardware": small},
            {"group": "gpu", "pattern": "gpu{index:03}", "count": len(nodes), "hardware": hw},
        ],
        "fabric": fabric,
        "partitions": {
            "slurm": {
                "controllers": "ctl1",
                "partitions": [
                    {"name": "gpu", "nodes": str(NodeSet.fromlist(slurm)), "default": True}
                ],
                "pyxis": {"enabled": False},
                "enroot": {"enabled": False},
            }
        },
    }
    if workers:
        spec["nodes"].append({"group": "kcp", "names": "kcp1", "hardware": small})
        spec["partitions"]["kubernetes"] = {
            "control_plane": "kcp1",
            "workers": str(NodeSet.fromlist(workers)),
        }
    return spec


@st.composite
def _nodes_and_sus(
    draw, min_su: int = 1, multiple_of: int = 1
) -> tuple[list[str], list[list[str]], list[bool]]:
    """Nodes cut into uneven SUs (sizes a multiple of ``multiple_of``), in a shuffled order,
    and which of them are Slurm's (at least one; the rest are Kubernetes workers)."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=min_su, max_size=5))
    sizes = [s * multiple_of for s in sizes]
    nodes = [f"gpu{i:03}" for i in range(1, sum(sizes) + 1)]
    order = draw(st.permutations(nodes))
    sus, at = [], 0
    for s in sizes:
        sus.append(list(order[at : at + s]))
        at += s
    mask = draw(st.lists(st.booleans(), min_size=len(nodes), max_size=len(nodes)))
    mask[draw(st.integers(0, len(nodes) - 1))] = True  # Slurm needs one node
    return nodes, sus, mask


# ---------------------------------------------------------------- rail-optimized


@st.composite
def rail_optimized_specs(draw, nvlink: bool | None = None, clashing: bool = False) -> dict:
    domain = draw(st.integers(1, 3)) if nvlink or (nvlink is None and draw(st.booleans())) else None
    nodes, sus, mask = draw(_nodes_and_sus(multiple_of=domain or 1))
    rails = draw(st.integers(1, 3))
    spines = draw(st.integers(1, 3))
    core = draw(st.one_of(st.none(), st.integers(1, len(sus))))
    listed = (
        draw(st.booleans()) or len({len(s) for s in sus[:-1]}) > 1 or len(sus[-1]) > len(sus[0])
    )
    ro: dict[str, Any] = {"rails": rails}
    if listed:
        # Valid fabrics avoid the names railyard gives upper tiers; the clash test does not.
        pick = GROUP_NAME if clashing else GROUP_NAME.filter(lambda n: not RESERVED.match(n))
        su_names = draw(st.lists(pick, min_size=len(sus), max_size=len(sus), unique=True))
        ro["scalable_units"] = [
            {"name": n, "nodes": ",".join(m)} for n, m in zip(su_names, sus, strict=True)
        ]
    else:  # equal SUs, the last one possibly shorter: nodes_per_su cuts the list as written
        ro["nodes"] = ",".join(n for m in sus for n in m)
        ro["nodes_per_su"] = len(sus[0])
    up, core_up = draw(st.integers(1, 2)), draw(st.integers(1, 2))  # parallel uplinks
    biggest = max(len(s) for s in sus)
    ro["leaf_radix"] = biggest + spines * up
    pods = len(sus) if core is None else core
    cores = draw(st.integers(1, 2)) if core is not None else 0
    ro["spines"] = {
        "count": spines,
        "radix": max(2, pods * rails * up + cores * core_up),
        "links_per_leaf": up,
    }
    if core is not None:
        n_pods = -(-len(sus) // core)
        ro["core"] = {
            "count": cores,
            "sus_per_group": core,
            "radix": max(2, n_pods * spines * core_up),
            "links_per_spine": core_up,
        }
    if domain:
        ro["nvlink"] = {"domain_nodes": domain}
    return _spec({"link_speed": "800G", "rail_optimized": ro}, nodes, mask, rails)


# ---------------------------------------------------------------- explicit


@st.composite
def explicit_specs(draw, nvlink: bool | None = None, clashing: bool = False) -> dict:
    nodes, sus, mask = draw(_nodes_and_sus())
    rails = draw(st.integers(1, 3))
    # Pods: consecutive runs of SUs, each with its own spines; more than one needs a core.
    cuts = (
        sorted(draw(st.sets(st.integers(1, len(sus) - 1), max_size=len(sus) - 1)))
        if len(sus) > 1
        else []
    )
    pods = [sus[a:b] for a, b in zip([0, *cuts], [*cuts, len(sus)], strict=True)]
    cores = draw(st.integers(1 if len(pods) > 1 else 0, 2))
    pod_spines = [draw(st.integers(1, 2)) for _ in pods]
    n_groups = len(sus) + len(pods) + (1 if cores else 0)
    domains = None
    if nvlink or (nvlink is None and draw(st.booleans())):
        domains = []
        for su in sus:  # uneven domains inside each SU, covering it
            cut = (
                sorted(draw(st.sets(st.integers(1, len(su) - 1), max_size=2)))
                if len(su) > 1
                else []
            )
            domains += [su[a:b] for a, b in zip([0, *cut], [*cut, len(su)], strict=True)]
    # Names for every group and NVLink domain, drawn in one go: unique unless clashes are
    # wanted; each SU, pod and core group then carries its name or none (smallest switch).
    size = n_groups + len(domains or ())
    pool = draw(st.lists(GROUP_NAME, min_size=size, max_size=size, unique=not clashing))
    labels = [name if draw(st.booleans()) else None for name in pool[:n_groups]]

    switches: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []

    def switch(name: str, tier: str, radix: int, label: str | None, partial: bool) -> None:
        sw: dict[str, Any] = {"name": name, "tier": tier, "radix": max(2, radix)}
        if label and not partial:
            sw["group"] = label
        switches.append(sw)

    up = draw(st.integers(1, 2))  # parallel links between switches (count:)
    # Rewire one NIC of one node to the same rail's leaf of another SU: cabling then joins
    # the two SUs into one group, which is refused unless every switch of both carries one
    # group name (only the clash test draws it: no other spec with it is valid).
    # (The node keeps its other rails, so it needs two; and a leaf must keep a node, so only
    # an SU of two or more nodes gives one away.)
    rewire = clashing and rails > 1 and len(sus) > 1 and any(len(su) > 1 for su in sus) and draw(st.booleans())
    su_index = 0
    spine_names: list[str] = []
    for p, pod in enumerate(pods, 1):
        spines = [f"sp{p}-{k}" for k in range(1, pod_spines[p - 1] + 1)]
        for su in pod:
            label = labels[su_index]
            # Some SUs name their group on one rail's leaf only: one label names the group.
            partial = draw(st.booleans())
            for r in range(rails):
                leaf = f"lf{su_index + 1}-{r}"
                radix = len(su) + rewire + len(spines) * up
                switch(leaf, "leaf", radix, label, partial and r > 0)
                links += [{"a": n, "b": leaf} for n in su]
                links += [{"a": leaf, "b": s, "count": up} for s in spines]
            su_index += 1
        for s in spines:
            switch(s, "spine", (len(pod) * rails + cores) * up, labels[len(sus) + p - 1], False)
        spine_names += spines
    for c in range(1, cores + 1):
        switch(f"cr{c}", "core", len(spine_names) * up, labels[-1], False)
        links += [{"a": s, "b": f"cr{c}", "count": up} for s in spine_names]

    if rewire:
        event("explicit: one NIC rewired to another SU")
        i = draw(st.sampled_from([k for k, su in enumerate(sus) if len(su) > 1]))
        j = draw(st.sampled_from([k for k in range(len(sus)) if k != i]))
        node, r = draw(st.sampled_from(sus[i])), draw(st.integers(0, rails - 1))
        links.remove({"a": node, "b": f"lf{i + 1}-{r}"})
        links.append({"a": node, "b": f"lf{j + 1}-{r}"})
    explicit: dict[str, Any] = {
        "switches": draw(st.permutations(switches)),
        "links": draw(st.permutations(links)),
    }
    if domains is not None:
        explicit["nvlink"] = {
            "domains": [
                {"name": n, "nodes": ",".join(d)}
                for n, d in zip(pool[n_groups:], domains, strict=True)
            ]
        }
    spec = _spec({"link_speed": "400G", "explicit": explicit}, nodes, mask, rails)
    if not clashing:
        assume(_unique_group_names(spec))
    return spec


def _unique_group_names(spec: dict) -> bool:
    """Whether the spec is valid as far as group names go: no name twice, and no group that
    cabling joins although the spec gives its switches two names."""
    try:
        all_names = group_names(spec)
    except ConflictingGroups:
        return False
    return len(set(all_names)) == len(all_names)


def fabrics(nvlink: bool | None = None) -> st.SearchStrategy[dict]:
    return st.one_of(rail_optimized_specs(nvlink=nvlink), explicit_specs(nvlink=nvlink))


def _compile(spec: dict):
    fabric = spec["fabric"]
    kind = "rail_optimized" if "rail_optimized" in fabric else "explicit"
    event(f"{kind}{' + nvlink' if 'nvlink' in fabric[kind] else ''}")
    try:
        levels = "/".join(lvl for lvl in LEVELS_TOP_DOWN if lvl in fabric_groups(spec))
    except ConflictingGroups:
        levels = "(groups the spec names twice)"
    event(f"levels: {levels}")
    note(yaml.safe_dump(spec, sort_keys=False))
    return loads_plan(yaml.safe_dump(spec, sort_keys=False), "<hypothesis>")


# ---------------------------------------------------------------- Slurm


MISSING = slurm_missing_reason()


@pytest.mark.slurm
@pytest.mark.timeout(LIVE_TIMEOUT)
@pytest.mark.skipif(MISSING is not None, reason=f"no Slurm on this host: {MISSING}")
@_settings(LIVE_EXAMPLES)
@given(spec=fabrics())
def test_slurmctld_loads_the_tree_the_spec_describes(spec, tmp_path_factory):
    spec["cluster"]["versions"]["slurm"] = "22.05"
    spec["partitions"]["slurm"]["topology"] = "tree"  # 22.05 has no topology/block
    plan = _compile(spec)
    out = tmp_path_factory.mktemp("render")
    write(render(plan), out)
    with SlurmHost(out / "slurm") as host:
        observed = {
            t["SwitchName"]: (t["Level"], t["Nodes"], t["Switches"]) for t in host.show_topology()
        }
    assert observed == expected_topology(spec)


_BLOCK = re.compile(r"^BlockName=(\S+) Nodes=(\S+)$", re.MULTILINE)


@pytest.mark.timeout(PURE_TIMEOUT)
@_settings(PURE_EXAMPLES)
@given(spec=fabrics(nvlink=True))
def test_block_lines_are_the_nvlink_domains(spec):
    # Block topology needs Slurm 23.11+ (railyard: 24.05+); Debian 12's 22.05 cannot load it,
    # so the rendered lines are compared with the derivation without slurmctld. 25.05 takes
    # partial blocks (a domain that gives Slurm fewer nodes than the base block).
    spec["cluster"]["versions"]["slurm"] = "25.05"
    spec["partitions"]["slurm"]["topology"] = "block"  # topology.conf, as 24.x reads it
    conf = render(_compile(spec))["slurm/topology.conf"]
    listed = _BLOCK.findall(conf)
    blocks = {name: frozenset(NodeSet(nodes)) for name, nodes in listed}
    assert len(blocks) == len(listed)
    assert blocks == expected_blocks(spec)
    sizes = re.search(r"^BlockSizes=(\S+)$", conf, re.MULTILINE)
    assert sizes and tuple(int(x) for x in sizes.group(1).split(",")) == expected_block_sizes(spec)
    # Slurm's aggregates (block_record.c): at each BlockSizes level of 2^j base blocks,
    # blocks [k*2^j, (k+1)*2^j) in the order listed. None may reach into a second SU.
    su = block_su(spec)
    order = [name for name, _ in listed]
    base = int(sizes.group(1).split(",")[0])
    for size in (int(x) for x in sizes.group(1).split(",")[1:]):
        step = size // base
        for k in range(0, len(order), step):
            spanned = {su[b] for b in order[k : k + step]}
            assert len(spanned) == 1, f"BlockSizes {size} joins {order[k : k + step]} across SUs {spanned}"
    # 24.11 stops on a block smaller than the base: refused there, and only then.
    spec["cluster"]["versions"]["slurm"] = "24.11"
    partial = [b for b, members in expected_blocks(spec).items() if len(members) < base]
    try:
        _compile(spec)
    except SpecError as exc:
        assert partial, f"refused without a partial block:\n{exc}"
        assert all(f"NVLink domain {b} has" in str(exc) for b in partial), str(exc)
        event("24.11: partial blocks refused")
        return
    assert not partial, f"24.11 took partial blocks {partial}"


# ---------------------------------------------------------------- Kubernetes


def _k8s(spec: dict) -> tuple[Any, dict]:
    spec["cluster"]["versions"]["slurm"] = "26.05"  # any layout compiles; Slurm is not checked here
    assume("kubernetes" in spec["partitions"])
    plan = _compile(spec)
    return plan, spec


@pytest.mark.timeout(PURE_TIMEOUT)
@_settings(PURE_EXAMPLES)
@given(spec=fabrics())
def test_kueue_levels_nest_and_label_every_worker(spec):
    plan, spec = _k8s(spec)
    topo = next(o for o in plan.kubernetes.kueue if o["kind"] == "Topology")
    levels = [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]]
    keys, labels = expected_labels(spec)
    assert levels == keys
    fabric_levels = levels[:-1]
    for worker in plan.kubernetes.workers:
        mine = plan.kubernetes.labels[worker]
        assert set(fabric_levels) <= set(mine), f"{worker} lacks a level label"
        assert {k: mine[k] for k in fabric_levels} == labels[worker]
    # nesting: each domain of a finer level lies inside exactly one domain of the level above
    for upper, lower in itertools.pairwise(fabric_levels):
        parents: dict[str, set[str]] = {}
        for worker in plan.kubernetes.workers:
            mine = plan.kubernetes.labels[worker]
            parents.setdefault(mine[lower], set()).add(mine[upper])
        assert all(len(p) == 1 for p in parents.values()), (upper, lower, parents)


@pytest.mark.timeout(PURE_TIMEOUT)
@_settings(PURE_EXAMPLES)
@given(spec=fabrics())
def test_every_hypernode_has_one_parent_and_a_unique_name(spec):
    plan, spec = _k8s(spec)
    docs = [o for o in plan.kubernetes.volcano if o["kind"] == "HyperNode"]
    names_ = [d["metadata"]["name"] for d in docs]
    assert len(names_) == len(set(names_)), f"a HyperNode name repeats: {names_}"
    tier = {d["metadata"]["name"]: d["spec"]["tier"] for d in docs}
    top = max(tier.values())
    parents: dict[str, list[str]] = {n: [] for n in tier}
    for d in docs:
        for m in d["spec"]["members"]:
            ref = m["selector"]["exactMatch"]["name"]
            if m["type"] == "HyperNode":
                assert tier[ref] == d["spec"]["tier"] - 1, (d["metadata"]["name"], ref)
                parents[ref].append(d["metadata"]["name"])
            else:
                assert d["spec"]["tier"] == 1 and ref in plan.kubernetes.workers
    for name, ps in parents.items():
        assert len(ps) == (0 if tier[name] == top else 1), f"HyperNode {name} has parents {ps}"
    expected = expected_hypernodes(spec)
    assert {t: hypernode_nodes(docs, t) for t in expected} == {
        t: {n: set(m) for n, m in hns.items()} for t, hns in expected.items()
    }
    assert top == len([lvl for lvl in LEVELS_TOP_DOWN if lvl in fabric_groups(spec)])


# ---------------------------------------------------------------- names that clash


@pytest.mark.timeout(PURE_TIMEOUT)
@_settings(PURE_EXAMPLES)
@given(spec=st.one_of(rail_optimized_specs(clashing=True), explicit_specs(clashing=True)))
def test_clashing_group_names_are_refused_and_only_those(spec):
    """Names that repeat across groups, groups that cabling joins but the spec names twice,
    and a node cabled to leaves of two otherwise separate groups (named or not) are refused;
    every other spec compiles."""
    spec["cluster"]["versions"]["slurm"] = "26.05"
    unique = _unique_group_names(spec)
    try:
        _compile(spec)
    except SpecError as exc:
        assert not unique, f"a fabric with unique group names was refused:\n{exc}"
        rules = ("names both", "already used", "are one", "the cabling would merge them")
        hit = [rule for p in exc.problems for rule in rules if rule in p.message]
        assert hit, str(exc)
        for rule in sorted(set(hit)):
            event(f"refused: {rule}")
        return
    event("compiled")
    assert unique, "group names clash but the spec compiled"

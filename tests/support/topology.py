"""The Slurm topology a plan should produce, in the shape `scontrol show topology` reports."""

from __future__ import annotations

from typing import Any

from railyard.drift.slurm import parse_topology
from railyard.hostlist import expand

Topology = dict[str, tuple[int, frozenset[str], frozenset[str]]]


def expected_topology(plan) -> Topology:
    """switch -> (level, all nodes below it, child switches), as scontrol reports them."""
    out: Topology = {}
    for sw in plan.slurm.switches:  # leaves first, parents after their children
        if sw.nodes:
            out[sw.name] = (0, frozenset(expand(sw.nodes)), frozenset())
        else:
            kids = expand(sw.switches)
            level = 1 + max(out[k][0] for k in kids)
            out[sw.name] = (level, frozenset().union(*(out[k][1] for k in kids)), frozenset(kids))
    return out


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

"""Recorded observations (tests/drift/fixtures, see its README) turned into Observed parts."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from railyard.drift.files import summarize_events
from railyard.drift.kubernetes import observation
from railyard.drift.observed import (
    FilesObservation,
    KubernetesObservation,
    NodeObservation,
    NodesObservation,
    Observed,
    SlurmObservation,
    UnitState,
)
from railyard.drift.slurm import parse_nodes, parse_partitions, parse_topology

FIX = Path(__file__).resolve().parent / "fixtures"


def slurm_text(case: str, what: str) -> str:
    return (FIX / "slurm" / case / f"{what}.txt").read_text()


def slurm_obs(nodes: str = "clean", partitions: str = "clean", topology: str = "clean",
              splice: dict[str, str] | None = None, controller: str = "ctl1") -> SlurmObservation:
    """Slurm as recorded; ``splice={"gpu003": "slurmd_stopped"}`` takes that node's record
    from another recorded case (the recorder could run one slurmd at a time only)."""
    parsed = parse_nodes(slurm_text(nodes, "show_node"))
    for name, case in (splice or {}).items():
        other = {n.name: n for n in parse_nodes(slurm_text(case, "show_node"))}
        parsed = [other[name] if n.name == name else n for n in parsed]
    switches, blocks = parse_topology(slurm_text(topology, "show_topology"))
    return SlurmObservation(controller, tuple(parsed), tuple(parse_partitions(slurm_text(partitions, "show_partition"))),
                            tuple(switches), tuple(blocks))


def events(name: str) -> list[dict[str, Any]]:
    return json.loads((FIX / "ansible" / f"{name}.events.json").read_text())


def files_obs(name: str) -> FilesObservation:
    s = summarize_events(events(name))
    roles = tuple(dict.fromkeys(c.role for c in s.changes))
    return FilesObservation(hosts=s.seen, roles=roles, changes=s.changes, failures=s.failures,
                            unreachable=s.unreachable)


def nodes_obs(name: str = "clean", **changes: dict[str, Any]) -> NodesObservation:
    """``nodes_obs(gpu004={"exists": False})`` changes fields of one node;
    ``nodes_obs(gpu003={"units": {"slurmd.service": {"active": "inactive"}}})`` of its units."""
    rows = json.loads((FIX / "nodes" / f"{name}.json").read_text())
    nodes = []
    for r in rows:
        n = NodeObservation(r["name"], r["driver"], r["handle"], r["exists"], r["power"], r["reachable"],
                            r["detail"], tuple(UnitState(*s) for s in r["services"]))
        if n.name in changes:
            change = dict(changes[n.name])
            units = change.pop("units", {})
            services = tuple(replace(u, **units[u.unit]) if u.unit in units else u for u in n.services)
            n = replace(n, **{"services": services, **change})
        nodes.append(n)
    return NodesObservation(tuple(nodes))


def k8s_docs() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    nodes = json.loads((FIX / "kubernetes" / "nodes.json").read_text())
    lists = json.loads((FIX / "kubernetes" / "objects.json").read_text())
    return nodes, lists


def k8s_obs(mutate: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None) -> KubernetesObservation:
    nodes, lists = k8s_docs()
    nodes, lists = copy.deepcopy(nodes), copy.deepcopy(lists)
    if mutate is not None:
        mutate(nodes, lists)
    return observation(nodes, lists)


def clean_observed() -> Observed:
    return Observed(slurm=slurm_obs(), files=files_obs("clean"), nodes=nodes_obs(), kubernetes=k8s_obs())

"""The fabric as people look at it: a terminal tree, a DOT graph, an SVG."""

from __future__ import annotations

import subprocess
from typing import Any

from railyard.compiler import Plan


def _children_of(plan: Plan) -> tuple[list[Any], dict[str, Any]]:
    fabric = plan.fabric
    assert fabric is not None
    by_name = {g.name: g for groups in fabric.groups.values() for g in groups}
    top_level = next(lvl for lvl in fabric.levels if lvl != "nvlink")
    return list(fabric.groups[top_level]), by_name


def _role(plan: Plan, node: str) -> str:
    n = plan.node(node)
    return n.partition or ",".join(n.roles)


def as_dict(plan: Plan) -> dict[str, Any]:
    tops, by_name = _children_of(plan)
    domains = {n: d.name for d in plan.fabric.groups.get("nvlink", ()) for n in d.nodes}  # type: ignore[union-attr]

    def walk(group: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": group.name, "level": group.level}
        if group.children:
            entry["children"] = [walk(by_name[c]) for c in group.children]
        else:
            entry["nodes"] = [{"name": n, "partition": _role(plan, n), "nvlink": domains.get(n)} for n in group.nodes]
        return entry

    return {"link_speed": plan.fabric.link_speed, "levels": list(plan.fabric.levels), "tree": [walk(g) for g in tops]}  # type: ignore[union-attr]


def as_tree(plan: Plan, tree_cls: Any) -> Any:
    data = as_dict(plan)
    root = tree_cls(f"[bold]{plan.name}[/] fabric, {data['link_speed']} ({' > '.join(data['levels'])})")

    def add(parent: Any, entry: dict[str, Any]) -> None:
        size = _count(entry)
        branch = parent.add(f"[cyan]{entry['level']}[/] [bold]{entry['name']}[/] ({size} nodes)")
        for child in entry.get("children", []):
            add(branch, child)
        if "nodes" in entry:
            from railyard.hostlist import fold

            by: dict[tuple[str, str | None], list[str]] = {}
            for n in entry["nodes"]:
                by.setdefault((n["partition"], n["nvlink"]), []).append(n["name"])
            for (part, dom), names in by.items():
                extra = f", NVLink {dom}" if dom else ""
                branch.add(f"{fold(names)} [dim]({part}{extra})[/]")

    for entry in data["tree"]:
        add(root, entry)
    return root


def _count(entry: dict[str, Any]) -> int:
    if "nodes" in entry:
        return len(entry["nodes"])
    return sum(_count(c) for c in entry.get("children", []))


def _id(*parts: str) -> str:
    # graphviz reads "a:b" in an edge as node a, port b: keep ':' out of node ids.
    return "__".join(p.replace("-", "_") for p in parts)


def as_dot(plan: Plan) -> str:
    import graphviz

    fabric = plan.fabric
    assert fabric is not None
    g = graphviz.Digraph(plan.name, graph_attr={"rankdir": "TB", "label": f"{plan.name} ({fabric.link_speed})"})
    shapes = {"core": "doubleoctagon", "spine": "octagon", "su": "box3d", "nvlink": "component"}
    for level, groups in fabric.groups.items():
        for grp in groups:
            g.node(_id(level, grp.name), f"{grp.name}\\n{level}, {len(grp.nodes)} nodes", shape=shapes.get(level, "box"))
    for level in ("spine", "core"):
        below = {"spine": "su", "core": "spine"}[level]
        for grp in fabric.groups.get(level, ()):
            for child in grp.children:
                g.edge(_id(level, grp.name), _id(below, child))
    from railyard.hostlist import fold

    domains = {d.nodes[0]: d for d in fabric.groups.get("nvlink", ()) if d.nodes}
    for su in fabric.groups.get("su", ()):
        parts: dict[str, list[str]] = {}
        for n in su.nodes:
            parts.setdefault(_role(plan, n), []).append(n)
        for part, names in parts.items():
            node_id = _id("nodes", su.name, part)
            g.node(node_id, f"{fold(names)}\\n{part}", shape="note")
            g.edge(_id("su", su.name), node_id)
        for first, dom in domains.items():
            if first in su.nodes:
                g.edge(_id("su", su.name), _id("nvlink", dom.name), style="dashed")
    return g.source


def as_svg(plan: Plan) -> str:
    dot = as_dot(plan)
    try:
        return subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        raise SystemExit("`dot` is not installed; apt-get install graphviz, or use --format dot") from None

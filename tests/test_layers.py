"""The package's layers point down: no two modules import each other, directly or through
others, and deploy and drift stand side by side (railyard.lifecycle wires them).

Every import counts, also one inside a function: a lazy import (for start-up time) is
fine, one that hides a cycle is not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "railyard"


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the railyard modules it imports (``from a.b import c`` is a.b.c when c is a
    module of the package, else a.b)."""
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for t in targets:
                while t and t not in modules:  # `import railyard.x.y` of a non-module: its package
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("railyard"):
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize(("lower", "upper"), [
    ("railyard.spec", "railyard.compiler"),        # parsing knows nothing of the compiler
    ("railyard.compiler", "railyard.render"),
    ("railyard.apply", "railyard.deploy"),         # the shared layer under both
    ("railyard.apply", "railyard.drift"),
    ("railyard.deploy", "railyard.drift"),         # side by side: railyard.lifecycle wires them
    ("railyard.drift", "railyard.deploy"),
    ("railyard.deploy", "railyard.lifecycle"),
    ("railyard.drift", "railyard.lifecycle"),
])
def test_a_layer_does_not_import_one_above_or_beside_it(lower, upper):
    graph = import_graph()
    wrong = sorted(f"{m} -> {t}" for m, ts in graph.items() if m == lower or m.startswith(lower + ".")
                   for t in ts if t == upper or t.startswith(upper + "."))
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_a_cycle(tmp_path):
    """The test itself can fail: a made-up package whose two modules import each other."""
    pkg = tmp_path / "railyard"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from railyard.b import y\n")  # a lazy import counts
    (pkg / "b.py").write_text("from railyard.a import x\ny = 1\n")
    graph = import_graph(pkg)
    assert graph["railyard.a.x"] == {"railyard.b"} and graph["railyard.b"] == {"railyard.a.x"}
    assert cycles(graph) == [["railyard.a.x", "railyard.b"]]

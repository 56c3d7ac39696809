"""Read a spec and compile it: the one entry point of the CLI, the Pulumi program, the
inventory plugin and the tests. Parsing (railyard.spec) knows nothing of the compiler;
this module puts the two together and gives every problem and note its line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from railyard.compiler import Plan, cycle_collector_paused
from railyard.compiler import compile as compile_plan
from railyard.compiler.validate import notes
from railyard.errors import SpecError
from railyard.spec import Cluster, parse, with_line
from railyard.specload import decode, read_bytes


def load(path: str | Path) -> Cluster:
    """Read, parse and validate a spec; raise :class:`SpecError` naming every problem."""
    return load_plan(path).spec


def loads(text: str, source: str = "<spec>") -> Cluster:
    return loads_plan(text, source).spec


def load_plan(path: str | Path) -> Plan:
    """Read, validate and compile in one pass."""
    return loads_plan(decode(read_bytes(path), str(path)), source=str(path))


def loads_plan(text: str, source: str = "<spec>") -> Plan:
    with cycle_collector_paused():  # as compile_plan does: the parsed data is large and long-lived
        cluster, lines = parse(text, source)
    try:
        plan = compile_plan(cluster, source)
    except SpecError as exc:
        raise SpecError(source, [with_line(p, lines) for p in exc.problems]) from None
    found = [with_line(n, lines) for n in notes(plan)]
    return replace(plan, notes=tuple(sorted(found, key=lambda p: (p.line or 0, p.path, p.message))))

"""Errors a user can act on: each names where in the spec it is and what to change."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a spec. ``path`` is a YAML path such as ``nodes[1].hardware.nics``."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path} (line {self.line})" if self.line else self.path
        return f"{where}: {self.message}"


class SpecError(Exception):
    """The spec is invalid. Carries every problem found, sorted by where it is."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = sorted(set(problems), key=lambda p: (p.line or 0, p.path, p.message))
        lines = [f"{source}: {len(self.problems)} problem(s), nothing was applied"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))

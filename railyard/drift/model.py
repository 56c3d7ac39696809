"""What a drift check says: findings, errors and notes, sorted, with one exit code.

How the outcome maps to exit codes (:mod:`railyard.exitcodes`, terraform's convention):

* ``ERROR`` (1) when any :class:`CheckError` is present: a collector failed or timed out,
  or a role failed in check mode, so the report is incomplete and cannot say "clean".
  Errors win over drift: an incomplete check must not read as a complete one.
* ``DRIFT`` (2) when there are findings and no errors.
* ``OK`` (0) only when every requested layer was observed and nothing differs.

An unreachable host is a *finding* (``kind="unreachable"``, in the layer that could not
reach it), never silence: the spec says every node is up and answering, so a node that
does not answer is drift (exit 2), and ``pulumi up --refresh`` is what brings it back.
:attr:`DriftReport.unreachable` lists those hosts. Notes (a role that does not exist yet,
a partition railyard does not deploy yet) never change the exit code: the Pulumi program
skips the same things, so they are not drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from railyard import exitcodes

# Display and sort order: a missing machine explains everything after it.
LAYERS: tuple[str, ...] = ("nodes", "files", "slurm", "kubernetes")

UNREACHABLE = "unreachable"
# A node the spec keeps as a spare that a scheduler has (Slurm or Kubernetes registered it).
SPARE_IN_SCHEDULER = "spare_in_scheduler"


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """``gpu2`` before ``gpu10``; names that are all text sort as text."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def _layer_index(layer: str) -> int:
    return LAYERS.index(layer) if layer in LAYERS else len(LAYERS)


@dataclass(frozen=True, slots=True)
class Finding:
    """One way the running cluster differs from the plan, and what restores it.

    ``subject`` is the host (``gpu003``) or the object (``topology``, ``partition/gpu``,
    ``ClusterQueue/gpu``) that differs. ``message`` says what differs, ``fix`` what to run.
    ``role`` and ``path`` are set by the files layer: the role that would restore ``path``.
    """

    layer: str
    subject: str
    kind: str
    message: str
    fix: str = ""
    expected: str = ""
    observed: str = ""
    role: str = ""
    path: str = ""

    @property
    def line(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message

    def sort_key(self) -> tuple[Any, ...]:
        return (_layer_index(self.layer), natural_key(self.subject), natural_key(self.path), self.kind,
                self.message, self.fix, self.expected, self.observed, self.role)

    def to_dict(self) -> dict[str, str]:
        return {
            "layer": self.layer,
            "subject": self.subject,
            "kind": self.kind,
            "message": self.message,
            "fix": self.fix,
            "expected": self.expected,
            "observed": self.observed,
            "role": self.role,
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class CheckError:
    """The check itself could not finish somewhere: the report is incomplete there."""

    layer: str
    subject: str
    message: str

    def sort_key(self) -> tuple[Any, ...]:
        return (_layer_index(self.layer), natural_key(self.subject), self.message)

    def to_dict(self) -> dict[str, str]:
        return {"layer": self.layer, "subject": self.subject, "message": self.message}


@dataclass(frozen=True)
class DriftReport:
    """Findings, errors and notes, deduplicated and sorted however they were given."""

    cluster: str
    layers: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    errors: tuple[CheckError, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(sorted(set(self.layers), key=_layer_index)))
        object.__setattr__(self, "findings", tuple(sorted(set(self.findings), key=Finding.sort_key)))
        object.__setattr__(self, "errors", tuple(sorted(set(self.errors), key=CheckError.sort_key)))
        object.__setattr__(self, "notes", tuple(sorted(set(self.notes))))

    @property
    def unreachable(self) -> tuple[str, ...]:
        hosts = {f.subject for f in self.findings if f.kind == UNREACHABLE}
        return tuple(sorted(hosts, key=natural_key))

    @property
    def exit_code(self) -> int:
        if self.errors:
            return exitcodes.ERROR
        if self.findings:
            return exitcodes.DRIFT
        return exitcodes.OK

    @property
    def status(self) -> str:
        return {exitcodes.OK: "clean", exitcodes.DRIFT: "drift", exitcodes.ERROR: "error"}[self.exit_code]

    def drifted_roles(self) -> dict[str, tuple[str, ...]]:
        """role -> hosts where running that role again restores what differs (files and units).

        What ``pulumi up`` needs to re-run exactly those roles on exactly those hosts.
        """
        out: dict[str, set[str]] = {}
        for f in self.findings:
            if f.role and f.layer in ("files", "nodes") and f.kind != UNREACHABLE:
                out.setdefault(f.role, set()).add(f.subject)
        return {role: tuple(sorted(hosts, key=natural_key)) for role, hosts in sorted(out.items())}

    def by_layer(self) -> dict[str, tuple[Finding, ...]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.layer, []).append(f)
        return {k: tuple(v) for k, v in out.items()}

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document. Every key is always present, in this order."""
        return {
            "cluster": self.cluster,
            "status": self.status,
            "exit_code": self.exit_code,
            "layers": list(self.layers),
            "counts": {
                "findings": len(self.findings),
                "errors": len(self.errors),
                "by_layer": {layer: len(fs) for layer, fs in self.by_layer().items()},
            },
            "unreachable": list(self.unreachable),
            "drifted_roles": {role: list(hosts) for role, hosts in self.drifted_roles().items()},
            "findings": [f.to_dict() for f in self.findings],
            "errors": [e.to_dict() for e in self.errors],
            "notes": list(self.notes),
        }

"""Renderers for a DriftReport: a rich table for people, JSON for machines. One interface."""

from __future__ import annotations

import json
from typing import Protocol, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from railyard.drift.model import DriftReport


class Renderer(Protocol):
    def render(self, report: DriftReport, out: TextIO) -> None:
        """Write the report to ``out``."""
        ...


class JsonRenderer:
    """Stable: keys in a fixed order, findings sorted; the same cluster state gives the same bytes."""

    def render(self, report: DriftReport, out: TextIO) -> None:
        out.write(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")


class TableRenderer:
    """One row per finding, grouped by layer (nodes, files, slurm, kubernetes), then errors and notes."""

    def __init__(self, width: int | None = None, color: bool | None = None) -> None:
        self.width = width
        self.color = color

    def _console(self, out: TextIO) -> Console:
        color = out.isatty() if self.color is None else self.color
        return Console(file=out, width=self.width, highlight=False, soft_wrap=False,
                       force_terminal=color, no_color=not color)

    def render(self, report: DriftReport, out: TextIO) -> None:
        con = self._console(out)
        layers = ", ".join(report.layers) or "none"
        if report.findings:
            table = Table(title=f"drift in cluster {report.cluster}", title_justify="left", show_lines=False,
                          expand=False)
            table.add_column("layer", style="bold", no_wrap=True)
            table.add_column("what differs", overflow="fold")
            table.add_column("to restore", overflow="fold", style="dim")
            for i, (layer, findings) in enumerate(report.by_layer().items()):
                if i:
                    table.add_section()
                for j, f in enumerate(findings):
                    table.add_row(layer if j == 0 else "", Text(f.message), Text(f.fix))
            con.print(table)
        for e in report.errors:
            con.print(Text.assemble(("✗ ", "red"), (f"[{e.layer}] ", "bold"), e.message))
        for note in report.notes:
            con.print(Text.assemble(("· ", "dim"), (note, "dim")))
        n, hosts = len(report.findings), len(report.unreachable)
        if report.errors:
            summary = Text.assemble(("error", "bold red"),
                                    f": the check is incomplete ({len(report.errors)} error(s)); "
                                    f"{n} finding(s) so far; layers {layers}")
        elif n:
            unreachable = f", {hosts} host(s) unreachable" if hosts else ""
            summary = Text.assemble(("drift", "bold yellow"),
                                    f": {n} finding(s){unreachable}; layers {layers}")
        else:
            summary = Text.assemble(("✓ clean", "bold green"),
                                    f": cluster {report.cluster} matches the spec; layers {layers}")
        con.print(summary)


def renderer_for(as_json: bool) -> Renderer:
    return JsonRenderer() if as_json else TableRenderer()

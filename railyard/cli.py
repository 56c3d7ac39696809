"""The ``railyard`` command. Rich output for people, ``--json`` where a machine reads it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from railyard import exitcodes
from railyard.errors import SpecError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _plan(spec: str) -> Any:
    from railyard.load import load_plan

    return load_plan(spec)


def _report_spec_error(exc: SpecError, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"valid": False, "source": exc.source, "problems": [
            {"path": p.path, "line": p.line, "message": p.message} for p in exc.problems
        ]}, indent=1))
    else:
        err.print(f"[bold red]{exc.source}[/]: {len(exc.problems)} problem(s); nothing was rendered or applied")
        for p in exc.problems:
            where = f"{p.path}" + (f" (line {p.line})" if p.line else "")
            # escape: a message quotes the spec, whose '[...]' rich would read as markup
            err.print(f"  [red]✗[/] [bold]{escape(where)}[/]: {escape(p.message)}", soft_wrap=True)
    return exitcodes.ERROR


def _print_notes(plan: Any) -> None:
    """What is allowed but worth knowing (railyard.compiler.validate.notes), one line each."""
    for n in plan.notes:
        where = f"{n.path}" + (f" (line {n.line})" if n.line else "")
        out.print(f"  [yellow]note[/] [bold]{escape(where)}[/]: {escape(n.message)}", soft_wrap=True)


def cmd_validate(args: argparse.Namespace) -> int:
    plan = _plan(args.spec)
    summary = {
        "valid": True,
        "cluster": plan.name,
        "nodes": len(plan.nodes),
        "slurm_compute": len(plan.slurm.compute) if plan.slurm else 0,
        "kubernetes_workers": len(plan.kubernetes.workers) if plan.kubernetes else 0,
        "gpus": sum(n.hardware.gpus.count for n in plan.nodes if n.hardware.gpus),
        "topology": plan.slurm.topology_format if plan.slurm else None,
    }
    summary["notes"] = [{"path": n.path, "line": n.line, "message": n.message} for n in plan.notes]
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        out.print(
            f"[green]✓[/] {args.spec}: cluster [bold]{plan.name}[/], {summary['nodes']} nodes "
            f"({summary['slurm_compute']} Slurm compute, {summary['kubernetes_workers']} Kubernetes workers), "
            f"{summary['gpus']} GPUs, Slurm topology: {summary['topology']}"
        )
        _print_notes(plan)
    return exitcodes.OK


def cmd_render(args: argparse.Namespace) -> int:
    from railyard.render import digest, render, write

    plan = _plan(args.spec)
    artifacts = render(plan)
    try:
        write(artifacts, Path(args.output))
    except FileExistsError as exc:
        err.print(f"[red]✗[/] {exc}")
        return exitcodes.ERROR
    if args.json:
        print(json.dumps({"output": args.output, "files": sorted(artifacts), "digest": digest(artifacts)}, indent=1))
    else:
        out.print(f"[green]✓[/] rendered {len(artifacts)} files into {args.output} (digest {digest(artifacts)[:12]})")
        _print_notes(plan)
    return exitcodes.OK


def cmd_topology(args: argparse.Namespace) -> int:
    from railyard import picture

    plan = _plan(args.spec)
    if plan.fabric is None:
        err.print("[yellow]this spec has no fabric[/]")
        return exitcodes.ERROR
    if args.format == "tree":
        if args.json:
            print(json.dumps(picture.as_dict(plan), indent=1))
        else:
            out.print(picture.as_tree(plan, Tree))
        return exitcodes.OK
    text = picture.as_dot(plan) if args.format == "dot" else picture.as_svg(plan)
    if args.output:
        Path(args.output).write_text(text)
        out.print(f"[green]✓[/] wrote {args.output}")
    else:
        sys.stdout.write(text)
    return exitcodes.OK


def cmd_inventory(args: argparse.Namespace) -> int:
    from railyard.compiler.inventory import to_script

    plan = _plan(args.spec)
    inv = to_script(plan)
    if args.json:
        print(json.dumps(inv, indent=1, sort_keys=True))
        return exitcodes.OK
    table = Table(title=f"inventory of {plan.name}")
    for col in ("host", "address", "partition", "groups", "fabric"):
        table.add_column(col)
    groups_of: dict[str, list[str]] = {}
    for group, hosts in plan.inventory.groups.items():
        for h in hosts:
            groups_of.setdefault(h, []).append(group)
    for n in plan.nodes:
        fabric = plan.inventory.hostvars[n.name].get("railyard_fabric", {})
        table.add_row(
            n.name,
            n.address,
            n.partition or "-",
            ", ".join(groups_of.get(n.name, [])),
            " / ".join(f"{k}={v}" for k, v in fabric.items()) or "-",
        )
    out.print(table)
    return exitcodes.OK


def cmd_lab_image(args: argparse.Namespace) -> int:
    from railyard.lab.image import ensure_image

    ref = ensure_image(force=args.force)
    out.print(f"[green]✓[/] node image {ref}")
    return exitcodes.OK


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2, which means DRIFT here
        self.print_usage(sys.stderr)
        self.exit(exitcodes.ERROR, f"{self.prog}: error: {message}\n")


# Commands that only read a spec: they skip importing Pulumi and the drift collectors
# (about a second of every `railyard validate` before the spec is even opened).
SPEC_COMMANDS = ("validate", "render", "topology", "inventory", "lab")


def parser(full: bool = True) -> argparse.ArgumentParser:
    p = _Parser(prog="railyard", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check a spec; exit 0 when valid, 1 with every problem otherwise")
    v.add_argument("spec")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("render", help="write every artifact (slurm.conf, topology, Kueue, ...) into a directory")
    r.add_argument("spec")
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_render)

    t = sub.add_parser("topology", help="show the fabric as the schedulers see it")
    t.add_argument("spec")
    t.add_argument("--format", choices=["tree", "dot", "svg"], default="tree")
    t.add_argument("-o", "--output")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_topology)

    i = sub.add_parser("inventory", help="the Ansible inventory (--json: the inventory-script format)")
    i.add_argument("spec")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_inventory)

    if full:
        from railyard.drift.cli import add_commands as add_drift_commands
        from railyard.lifecycle import add_commands as add_pulumi_commands

        add_pulumi_commands(sub)  # up, preview, refresh, destroy (Automation API, inline program)
        add_drift_commands(sub)

    lab = sub.add_parser("lab", help="the local lab: node image")
    lab_sub = lab.add_subparsers(dest="lab_command", required=True)
    img = lab_sub.add_parser("image", help="build the node image offline (cached by recipe)")
    img.add_argument("--force", action="store_true")
    img.set_defaults(func=cmd_lab_image)
    return p


REPORT = (
    "this is a bug in railyard, not a problem with your spec; please report it (the project's "
    "issue tracker) with the spec and the details saved in {where}"
)


def _report_internal_error(exc: BaseException, as_json: bool) -> int:
    """A bug: its own exit code, a short message, the traceback in a file rather than on screen."""
    import tempfile
    import traceback

    detail = "".join(traceback.format_exception(exc))
    try:
        with tempfile.NamedTemporaryFile("w", prefix="railyard-internal-", suffix=".txt", delete=False) as f:
            f.write(f"railyard {' '.join(sys.argv[1:])}\n\n{detail}")
            where = f.name
    except OSError:
        where = "(could not be saved; run again with RAILYARD_TRACEBACK=1 to print them)"
    message = f"internal error: {type(exc).__name__}: {str(exc)[:200]}"
    if as_json:
        print(json.dumps({"internal_error": message, "report": REPORT.format(where=where)}, indent=1))
    else:
        err.print(f"[bold red]✗ {escape(message)}[/]")
        err.print(escape(REPORT.format(where=where)), soft_wrap=True)
    if os.environ.get("RAILYARD_TRACEBACK") == "1":
        sys.stderr.write(detail)
    return exitcodes.INTERNAL


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(full=not (argv and argv[0] in SPEC_COMMANDS)).parse_args(argv)
    try:
        return args.func(args)
    except SpecError as exc:
        return _report_spec_error(exc, getattr(args, "json", False))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug (RecursionError, MemoryError too): never a traceback
        return _report_internal_error(exc, getattr(args, "json", False))


if __name__ == "__main__":
    sys.exit(main())

"""``railyard drift SPEC``: where the running cluster differs from the spec.

Exit codes (railyard.exitcodes): 0 clean, 2 drift (an unreachable host counts), 1 when
the check could not finish (a collector failed, a role failed in check mode, bad usage).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from railyard import exitcodes
from railyard.drift.model import LAYERS, CheckError

err = Console(stderr=True, highlight=False)


def parse_layers(text: str) -> tuple[str, ...]:
    """``files,slurm`` -> ("files", "slurm"); raises ValueError naming the unknown ones."""
    layers = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [layer for layer in layers if layer not in LAYERS]
    if unknown or not layers:
        raise ValueError(f"--layers: unknown layer(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {','.join(LAYERS)}")
    return layers


def _stack_note(stack: str, spec: str) -> str | None:
    from railyard.apply.engine import stack_spec
    from railyard.drift.collect import ROOT

    try:
        applied = stack_spec(stack, ROOT).resolve()
    except Exception as exc:  # noqa: BLE001 - a note, not a failure
        return f"stack {stack}: {exc}"
    if applied != Path(spec).resolve():
        return f"stack {stack} applies {applied}, not {spec}: its secrets may belong to another cluster"
    return None


def cmd_drift(args: argparse.Namespace) -> int:
    from railyard.drift.collect import (
        CollectorError,
        Timeouts,
        collect,
        spec_secrets,
        stack_secrets,
    )
    from railyard.drift.compare import compare
    from railyard.drift.render import renderer_for
    from railyard.load import load_plan

    try:
        layers = parse_layers(args.layers)
    except ValueError as exc:
        err.print(f"[red]✗[/] {exc}")
        return exitcodes.ERROR
    plan = load_plan(args.spec)  # a SpecError is reported (exit 1) by railyard.cli.main

    extra_errors: list[CheckError] = []
    extra_notes: list[str] = []
    secrets: dict[str, str] = {}
    if "files" in layers:
        try:
            secrets.update(spec_secrets(plan))
        except Exception as exc:  # noqa: BLE001 - SecretRefError and friends name the reference
            extra_errors.append(CheckError("files", "secrets", f"files: {exc}"))
        if args.stack:
            note = _stack_note(args.stack, args.spec)
            if note:
                extra_notes.append(note)
            try:
                secrets = {**stack_secrets(args.stack), **secrets}
            except (CollectorError, RuntimeError) as exc:
                extra_errors.append(CheckError("files", "secrets", f"files: {exc}"))

    timeouts = Timeouts(command=args.timeout) if args.timeout else Timeouts()
    if args.json or not sys.stderr.isatty():
        observed = collect(plan, layers, secrets=secrets, timeouts=timeouts, full=args.full)
    else:
        with err.status(f"checking {', '.join(layers)} of cluster {plan.name} ..."):
            observed = collect(plan, layers, secrets=secrets, timeouts=timeouts, full=args.full,
                               log=lambda line: err.print(f"[dim]{line}[/]"))
    if extra_errors or extra_notes:
        observed = dataclasses.replace(observed, errors=observed.errors + tuple(extra_errors),
                                       notes=observed.notes + tuple(extra_notes))
    report = compare(plan, observed, stack=args.stack)
    renderer_for(args.json).render(report, sys.stdout)
    return report.exit_code


def add_commands(subparsers: Any) -> None:
    """``drift`` for ``railyard``'s argument parser."""
    p = subparsers.add_parser(
        "drift",
        help=f"compare the running cluster with the spec; exit {exitcodes.OK} clean, "
             f"{exitcodes.DRIFT} drift, {exitcodes.ERROR} if the check could not finish",
    )
    p.add_argument("spec")
    p.add_argument("--json", action="store_true", help="a stable JSON document instead of the table")
    p.add_argument("--layers", default=",".join(LAYERS),
                   help=f"comma-separated, any of {','.join(LAYERS)} (default: all)")
    p.add_argument("--stack", default=None,
                   help="the Pulumi stack holding the cluster's generated secrets (the munge key); "
                        "without it, roles that need one are not checked")
    p.add_argument("--full", action="store_true",
                   help="run every role on every host in check mode, as if no host had a baseline from an "
                        "earlier clean check (the default checks only what moved since one)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one command on one host may take before the host counts as unreachable")
    p.set_defaults(func=cmd_drift)

"""``railyard up|preview|refresh|destroy``: the Pulumi lifecycle, and the one place where
deploy and drift meet: before an update of a stack that is up, the drift check finds the
hosts where roles would change something, and the update re-runs them there.

railyard.deploy drives the engine, railyard.drift checks the cluster; neither imports the
other (tests/test_layers.py). This module wires them, as the CLI's verbs.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from railyard import exitcodes
from railyard.apply.engine import LAB_STACK, AutomationError, Output, _print, load_stack_plan
from railyard.deploy import automation
from railyard.drift.collect import record_applied
from railyard.drift.remediation import find_drift
from railyard.paths import ROOT


def up(stack: str = LAB_STACK, *, refresh: bool = False, remediate: bool = True, work_dir: Path = ROOT,
       on_output: Output = _print) -> Any:
    """Create or update the cluster (railyard.deploy.automation.up).

    ``remediate`` (on a stack that was deployed before): run the drift check's nodes and
    files layers first; roles re-run on exactly the hosts where they would change
    something, and a node finding turns the refresh on. After the update, each Kubernetes
    worker's container runtime version is recorded for drift (railyard.drift.applied).
    """
    plan = load_stack_plan(stack, work_dir)
    drifted: dict[str, tuple[str, ...]] = {}
    if remediate and automation.deployed(stack, work_dir, plan):
        drifted, node_drift = find_drift(stack, plan, work_dir, on_output)
        refresh = refresh or node_drift
    result = automation.up(stack, refresh=refresh, remediate=drifted, work_dir=work_dir, on_output=on_output,
                           plan=plan)
    if plan.kubernetes is not None:  # what drift compares a worker's containerd with (railyard.drift.applied),
        on_output(f"railyard: {record_applied(plan)}")  # beside the drift baselines, as drift reads them
    return result


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} needs --yes when not run from a terminal", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _run(verb: Callable[[], Any]) -> int:
    """Run a verb; map its outcome to railyard's exit codes.

    Ctrl-C reaches the whole foreground process group, the pulumi engine included, which
    then cancels and saves the state. We wait for that instead of exiting under it (an
    engine left running holds the stack's lock); a second Ctrl-C aborts.
    """
    from pulumi.automation import errors

    interrupted = False

    def on_sigint(_signum: int, _frame: Any) -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        print("railyard: interrupted: pulumi is cancelling and saving the state (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        verb()
    except errors.CommandError as exc:
        text = str(exc)
        if interrupted:
            print("railyard: cancelled; run the same command again to converge", file=sys.stderr)
            return 130
        if "no changes were expected" in text:
            print("railyard: changes found where none were expected", file=sys.stderr)
            return exitcodes.DRIFT
        print(f"railyard: pulumi failed:\n{_tail(text)}", file=sys.stderr)
        return exitcodes.ERROR
    except AutomationError as exc:
        print(f"railyard: {exc}", file=sys.stderr)
        return exitcodes.ERROR
    except KeyboardInterrupt:
        print("railyard: aborted; run the same command again to converge", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
    return 130 if interrupted else exitcodes.OK


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def cmd_up(args: argparse.Namespace) -> int:
    load_stack_plan(args.stack)  # a spec error stops here, before anything is created
    if not args.yes:
        code = _run(lambda: automation.preview(args.stack))
        if code != exitcodes.OK or not _confirm(f"Apply these changes to stack {args.stack}?"):
            return code or exitcodes.ERROR
    return _run(lambda: up(args.stack, refresh=args.refresh, remediate=not args.no_drift_check))


def cmd_preview(args: argparse.Namespace) -> int:
    load_stack_plan(args.stack)
    return _run(lambda: automation.preview(args.stack, expect_no_changes=args.expect_no_changes))


def cmd_refresh(args: argparse.Namespace) -> int:
    load_stack_plan(args.stack)
    if not args.yes and not args.expect_no_changes and not _confirm(f"Refresh stack {args.stack}?"):
        return exitcodes.ERROR
    return _run(lambda: automation.refresh(args.stack, expect_no_changes=args.expect_no_changes))


def cmd_destroy(args: argparse.Namespace) -> int:
    if not args.yes and not _confirm(f"Destroy every resource of stack {args.stack}?"):
        return exitcodes.ERROR
    return _run(lambda: automation.destroy(args.stack))


def add_commands(subparsers: Any) -> None:
    """``up``, ``preview``, ``refresh`` and ``destroy`` for ``railyard``'s argument parser."""
    verbs = (
        ("up", cmd_up, "create or update the stack's cluster (Pulumi up)", True, False),
        ("preview", cmd_preview, "show what up would change", False, True),
        ("refresh", cmd_refresh, "read the real state of every resource into the stack", True, True),
        ("destroy", cmd_destroy, "remove every resource of the stack", True, False),
    )
    for name, func, help_, has_yes, has_expect in verbs:
        p = subparsers.add_parser(name, help=help_)
        p.add_argument("--stack", default=LAB_STACK, help=f"Pulumi stack (default {LAB_STACK})")
        if has_yes:
            p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
        if has_expect:
            p.add_argument("--expect-no-changes", action="store_true",
                           help=f"exit {exitcodes.DRIFT} if anything would change")
        if name == "up":
            p.add_argument("--refresh", action="store_true",
                           help="read the real state first: bring back nodes that vanished or stopped")
            p.add_argument("--no-drift-check", action="store_true",
                           help="skip the drift check that finds the hosts to re-run roles on "
                                "(roles then re-run only where their inputs changed)")
        p.set_defaults(func=func)

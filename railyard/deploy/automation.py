"""``railyard up|preview|refresh|destroy``: the lab stack through Pulumi's Automation API.

The program runs *inline* (``program=``): the engine needs no Python language host, which
the Go module proxy does not serve here. Project settings come from ``Pulumi.yaml``
(work_dir = repository root), stack config from ``Pulumi.<stack>.yaml``; the engine is the
one ``scripts/install-pulumi.sh`` builds, found in its cache. Output streams to the
terminal line by line (``on_output``), with per-task progress from the providers.

A spec error stops everything before the engine starts: the spec is compiled first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from railyard import exitcodes
from railyard.compiler import Plan
from railyard.deploy.program import ROOT, program

PROJECT = "railyard"
LAB_STACK = "lab"
LAB_PASSPHRASE = "railyard-lab"  # the lab is throwaway; real stacks bring their own
INSTALLER = ROOT / "scripts" / "install-pulumi.sh"

Output = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


class AutomationError(RuntimeError):
    pass


# --------------------------------------------------------------------------- set-up


def _version(path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in path.name.split("."))
    except ValueError:
        return ()


def pulumi_bin() -> Path:
    """The engine's bin directory: $PULUMI_BIN, the installer's cache, PATH, or the installer."""
    if os.environ.get("PULUMI_BIN"):
        return Path(os.environ["PULUMI_BIN"])
    cache = Path(os.environ.get("RAILYARD_CACHE", Path.home() / ".cache" / "railyard")) / "pulumi"
    cached = sorted((d for d in cache.glob("*") if _version(d) and (d / "bin" / "pulumi").exists()), key=_version)
    if cached:
        return cached[-1] / "bin"
    on_path = shutil.which("pulumi")
    if on_path:
        return Path(on_path).resolve().parent
    proc = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("PULUMI_BIN="):
            return Path(line.split("=", 1)[1])
    raise AutomationError(f"no Pulumi engine: {INSTALLER} failed:\n{proc.stderr[-2000:]}")


def engine_env(stack: str, bin_dir: Path) -> dict[str, str]:
    """What the engine and the provider processes need here (offline, local state)."""
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # The dynamic provider process runs `$PULUMI_PYTHON_CMD -m pulumi.dynamic`: this venv.
        "PULUMI_PYTHON_CMD": sys.executable,
        # ansible-runner forks from the provider process, a gRPC server: without this, gRPC
        # prints "Other threads are currently calling into gRPC, skipping fork() handlers".
        "GRPC_ENABLE_FORK_SUPPORT": "false",
    }
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ and "PULUMI_CONFIG_PASSPHRASE_FILE" not in os.environ:
        if stack != LAB_STACK:
            raise AutomationError(
                f"stack {stack}: set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE); "
                f"only the lab stack has a default ({LAB_PASSPHRASE!r})"
            )
        env["PULUMI_CONFIG_PASSPHRASE"] = LAB_PASSPHRASE
    return env


def backend_dir(work_dir: Path) -> Path | None:
    """A file:// backend directory (the engine does not create it)."""
    url = os.environ.get("PULUMI_BACKEND_URL")
    if url is None:
        settings = yaml.safe_load((work_dir / "Pulumi.yaml").read_text()) or {}
        url = (settings.get("backend") or {}).get("url")
    if not url or not url.startswith("file://"):
        return None
    path = Path(url.removeprefix("file://"))
    return path if path.is_absolute() else work_dir / path


def stack_spec(stack: str, work_dir: Path) -> Path:
    """The spec named by the stack's ``railyard:spec`` config, relative to the repository."""
    settings_file = work_dir / f"Pulumi.{stack}.yaml"
    if not settings_file.exists():
        raise AutomationError(f"no {settings_file.name} in {work_dir}: create it with `config: {{railyard:spec: ...}}`")
    config = (yaml.safe_load(settings_file.read_text()) or {}).get("config") or {}
    spec = config.get("railyard:spec")
    if not spec:
        raise AutomationError(f"{settings_file.name} has no railyard:spec (the cluster spec to apply)")
    path = Path(spec)
    return path if path.is_absolute() else ROOT / path


def load_stack_plan(stack: str, work_dir: Path = ROOT) -> Plan:
    """Raises SpecError with every problem, before anything talks to the engine."""
    from railyard.spec import load_plan

    return load_plan(stack_spec(stack, work_dir))


def open_stack(stack: str = LAB_STACK, work_dir: Path = ROOT, plan: Plan | None = None,
               remediate: dict[str, tuple[str, ...]] | None = None) -> Any:
    from pulumi import automation as auto

    plan = plan or load_stack_plan(stack, work_dir)
    bin_dir = pulumi_bin()
    backend = backend_dir(work_dir)
    if backend is not None:
        backend.mkdir(parents=True, exist_ok=True)
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir),  # Pulumi.yaml and Pulumi.<stack>.yaml are read from here
        env_vars=engine_env(stack, bin_dir),
        pulumi_command=auto.PulumiCommand(root=str(bin_dir.parent)),
    )
    return auto.create_or_select_stack(
        stack_name=stack, project_name=PROJECT, program=lambda: program(plan, remediate=remediate), opts=opts
    )


def _ensure_lab_image(plan: Plan, on_output: Output) -> None:
    """Build (or reuse) the node image before the engine starts: one build, not one per node."""
    from railyard.deploy.machines import podman_nodes

    if podman_nodes(plan):
        from railyard.lab.image import ensure_image

        on_output(f"railyard: lab node image {ensure_image()}")


# --------------------------------------------------------------------------- verbs


def preview(stack: str = LAB_STACK, *, expect_no_changes: bool = False, work_dir: Path = ROOT,
            on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).preview(
        on_output=on_output, expect_no_changes=expect_no_changes, diff=False, color="never"
    )


def up(stack: str = LAB_STACK, *, refresh: bool = False, remediate: bool = True, work_dir: Path = ROOT,
       on_output: Output = _print) -> Any:
    """Create or update the cluster.

    ``refresh=True`` reads the real state first (``pulumi up --refresh``): nodes that
    vanished or stopped since the last run are brought back in the same run.
    ``remediate`` (on a stack that was deployed before): run the drift check's nodes and
    files layers first; roles re-run on exactly the hosts where they would change
    something, and a node finding turns the refresh on.
    """
    plan = load_stack_plan(stack, work_dir)
    _ensure_lab_image(plan, on_output)
    drifted: dict[str, tuple[str, ...]] = {}
    if remediate and _deployed(open_stack(stack, work_dir, plan)):
        drifted, node_drift = find_drift(stack, plan, work_dir, on_output)
        refresh = refresh or node_drift
    return open_stack(stack, work_dir, plan, remediate=drifted).up(
        on_output=on_output, color="never", refresh=refresh)


def _deployed(stack: Any) -> bool:
    """True when the stack holds resources from an earlier up."""
    return len(stack.export_stack().deployment.get("resources") or []) > 1


def find_drift(stack: str, plan: Plan, work_dir: Path, on_output: Output) -> tuple[dict[str, tuple[str, ...]], bool]:
    """(role -> drifted hosts, whether any node drifted) from the drift check's nodes and
    files layers; an incomplete check is said, and what it did find is still remediated."""
    from railyard.drift.collect import collect, spec_secrets, stack_secrets
    from railyard.drift.compare import compare

    on_output(f"railyard: drift check of stack {stack} (nodes, files) before the update")
    secrets = {**stack_secrets(stack, work_dir), **spec_secrets(plan)}
    report = compare(plan, collect(plan, ("nodes", "files"), secrets=secrets), stack=stack)
    for line in [f.line for f in report.findings] + [e.message for e in report.errors]:
        on_output(f"railyard: drift: {line}")
    drifted = report.drifted_roles()
    for role, hosts in drifted.items():
        on_output(f"railyard: re-running role {role} on {', '.join(hosts)}")
    return drifted, any(f.layer == "nodes" for f in report.findings)


def refresh(stack: str = LAB_STACK, *, expect_no_changes: bool = False, work_dir: Path = ROOT,
            on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).refresh(
        on_output=on_output, expect_no_changes=expect_no_changes, color="never"
    )


def destroy(stack: str = LAB_STACK, *, work_dir: Path = ROOT, on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).destroy(on_output=on_output, color="never")


# --------------------------------------------------------------------------- CLI


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
        code = _run(lambda: preview(args.stack))
        if code != exitcodes.OK or not _confirm(f"Apply these changes to stack {args.stack}?"):
            return code or exitcodes.ERROR
    return _run(lambda: up(args.stack, refresh=args.refresh, remediate=not args.no_drift_check))


def cmd_preview(args: argparse.Namespace) -> int:
    load_stack_plan(args.stack)
    return _run(lambda: preview(args.stack, expect_no_changes=args.expect_no_changes))


def cmd_refresh(args: argparse.Namespace) -> int:
    load_stack_plan(args.stack)
    if not args.yes and not args.expect_no_changes and not _confirm(f"Refresh stack {args.stack}?"):
        return exitcodes.ERROR
    return _run(lambda: refresh(args.stack, expect_no_changes=args.expect_no_changes))


def cmd_destroy(args: argparse.Namespace) -> int:
    if not args.yes and not _confirm(f"Destroy every resource of stack {args.stack}?"):
        return exitcodes.ERROR
    return _run(lambda: destroy(args.stack))


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

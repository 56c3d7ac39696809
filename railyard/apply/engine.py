"""The Pulumi engine as railyard runs it: where its binary is, the environment it needs, the
stacks' settings. Deploy drives the engine with it; the drift check reads a stack's
secrets with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from railyard.compiler import Plan
from railyard.paths import ROOT

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
    from railyard.load import load_plan

    return load_plan(stack_spec(stack, work_dir))

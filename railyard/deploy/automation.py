"""``railyard up|preview|refresh|destroy``: the lab stack through Pulumi's Automation API.

The program runs *inline* (``program=``): the engine needs no Python language host, which
the Go module proxy does not serve here. Project settings come from ``Pulumi.yaml``
(work_dir = repository root), stack config from ``Pulumi.<stack>.yaml``; the engine is the
one ``scripts/install-pulumi.sh`` builds, found in its cache. Output streams to the
terminal line by line (``on_output``), with per-task progress from the providers.

A spec error stops everything before the engine starts: the spec is compiled first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railyard.apply.engine import (
    LAB_STACK,
    PROJECT,
    AutomationError,
    Output,
    _print,
    backend_dir,
    engine_env,
    load_stack_plan,
    pulumi_bin,
)
from railyard.compiler import Plan
from railyard.deploy.program import ROOT, program


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
    """Before the engine starts, for nodes that are podman containers: check the host's
    limits (nothing is created on a host that cannot run them), then build (or reuse) the
    node image: one build, not one per node."""
    from railyard.apply.machines import podman_nodes

    if podman_nodes(plan):
        from railyard.drivers.podman import host_problems
        from railyard.lab.image import ensure_image

        problems = host_problems()
        if problems:
            raise AutomationError("this host cannot run the lab's node containers:\n" +
                                  "\n".join(f"- {p}" for p in problems))
        on_output(f"railyard: lab node image {ensure_image()}")


# --------------------------------------------------------------------------- verbs


def preview(stack: str = LAB_STACK, *, expect_no_changes: bool = False, work_dir: Path = ROOT,
            on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).preview(
        on_output=on_output, expect_no_changes=expect_no_changes, diff=False, color="never"
    )


def up(stack: str = LAB_STACK, *, refresh: bool = False, remediate: dict[str, tuple[str, ...]] | None = None,
       work_dir: Path = ROOT, on_output: Output = _print, plan: Plan | None = None) -> Any:
    """Create or update the cluster.

    ``refresh=True`` reads the real state first (``pulumi up --refresh``): nodes that
    vanished or stopped since the last run are brought back in the same run.
    ``remediate``: role -> hosts where the drift check found that the role would change
    something; the role re-runs on exactly those hosts (railyard.lifecycle runs the check).
    """
    plan = plan or load_stack_plan(stack, work_dir)
    _ensure_lab_image(plan, on_output)
    return open_stack(stack, work_dir, plan, remediate=remediate or {}).up(
        on_output=on_output, color="never", refresh=refresh)


def deployed(stack: str, work_dir: Path = ROOT, plan: Plan | None = None) -> bool:
    """True when the stack holds resources from an earlier up."""
    state = open_stack(stack, work_dir, plan).export_stack()
    return len(state.deployment.get("resources") or []) > 1


def refresh(stack: str = LAB_STACK, *, expect_no_changes: bool = False, work_dir: Path = ROOT,
            on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).refresh(
        on_output=on_output, expect_no_changes=expect_no_changes, color="never"
    )


def destroy(stack: str = LAB_STACK, *, work_dir: Path = ROOT, on_output: Output = _print) -> Any:
    return open_stack(stack, work_dir).destroy(on_output=on_output, color="never")

"""What ``railyard up`` re-applies: the drift check's nodes and files layers, as role -> hosts."""

from __future__ import annotations

from pathlib import Path

from railyard.apply.engine import Output
from railyard.compiler import Plan
from railyard.drift.collect import collect, spec_secrets, stack_secrets
from railyard.drift.compare import compare


def find_drift(stack: str, plan: Plan, work_dir: Path, on_output: Output) -> tuple[dict[str, tuple[str, ...]], bool]:
    """(role -> drifted hosts, whether any node drifted) from the drift check's nodes and
    files layers; an incomplete check is said, and what it did find is still remediated."""
    on_output(f"railyard: drift check of stack {stack} (nodes, files) before the update")
    secrets = {**stack_secrets(stack, work_dir), **spec_secrets(plan)}
    report = compare(plan, collect(plan, ("nodes", "files"), secrets=secrets), stack=stack)
    for line in [f.line for f in report.findings] + [e.message for e in report.errors]:
        on_output(f"railyard: drift: {line}")
    drifted = report.drifted_roles()
    for role, hosts in drifted.items():
        on_output(f"railyard: re-running role {role} on {', '.join(hosts)}")
    return drifted, any(f.layer == "nodes" for f in report.findings)

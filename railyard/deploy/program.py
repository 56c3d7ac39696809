"""The Pulumi program: everything the Plan says, declared as resources, and the stack outputs.

The same function runs under ``pulumi up`` (``__main__.py``, via the Python language host)
and as the Automation API's inline program (:mod:`railyard.deploy.automation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi

from railyard.apply.artifacts import write_artifacts
from railyard.apply.playbooks import plan_playbooks
from railyard.compiler import Plan
from railyard.compiler.inventory import container_name
from railyard.deploy.components import (
    Context,
    Fabric,
    KubernetesPartition,
    SharedStorage,
    SlurmPartition,
    declare_playbooks,
)
from railyard.paths import ROOT
from railyard.render import render


def login_command(plan: Plan) -> str | None:
    if plan.slurm is None or not plan.slurm.login:
        return None
    login = plan.node(plan.slurm.login[0])
    if login.provision.driver == "podman":
        return f"podman exec -it {container_name(plan.name, login.name)} bash"
    user = login.provision.ssh_user
    return f"ssh {user}@{login.address}"


def topology_summary(plan: Plan) -> dict[str, Any]:
    f = plan.fabric
    out: dict[str, Any] = {"levels": [], "groups": {}, "slurm": None}
    if f is not None:
        out["levels"] = list(f.levels)
        out["groups"] = {level: {g.name: list(g.nodes) for g in groups} for level, groups in f.groups.items()}
        out["link_speed"] = f.link_speed
    if plan.slurm is not None:
        out["slurm"] = {
            "format": plan.slurm.topology_format,
            "switches": {s.name: s.nodes or s.switches for s in plan.slurm.switches},
        }
    return out


def program(plan: Plan, root: Path = ROOT, remediate: dict[str, tuple[str, ...]] | None = None) -> Context:
    """*remediate*: role -> hosts to re-run it on (a drift report's ``drifted_roles``)."""
    artifacts = render(plan)
    adir = write_artifacts(root, plan, artifacts)
    planned, notes = plan_playbooks(plan, root, artifacts)
    for note in notes:
        pulumi.log.info(note)
    ctx = Context(plan=plan, root=str(root), artifacts_dir=str(adir), planned=planned,
                  remediate=dict(remediate or {}))

    components: dict[str, Any] = {"fabric": Fabric(plan.name, ctx), "storage": SharedStorage(plan.name, ctx)}
    if plan.slurm is not None:
        components["slurm"] = SlurmPartition(plan.name, ctx)
    if plan.kubernetes is not None:
        components["kubernetes"] = KubernetesPartition(plan.name, ctx)
    declare_playbooks(ctx, components)
    for component in components.values():
        component.finish(ctx)

    pulumi.export("cluster", plan.name)
    pulumi.export("controller", plan.slurm.controllers[0] if plan.slurm else None)
    pulumi.export("login_command", login_command(plan))
    pulumi.export("nodes", [
        {"name": n.name, "address": n.address, "partition": n.partition, "roles": list(n.roles),
         "driver": n.provision.driver}
        for n in plan.nodes
    ])
    pulumi.export("partitions", {
        **({f"slurm/{p.name}": p.hostlist for p in plan.slurm.partitions} if plan.slurm else {}),
        **({"kubernetes": ",".join(plan.kubernetes.workers)} if plan.kubernetes else {}),
    })
    if "kubernetes" in components:
        pulumi.export("kubernetes", components["kubernetes"].summary)
    pulumi.export("topology", topology_summary(plan))
    pulumi.export("roles", [pb.role for pb in planned])
    pulumi.export("skipped", notes)
    pulumi.export("artifacts", str(adir))
    return ctx

"""The cluster as Pulumi components: the machines and wires, storage, and the two partitions.

Every child has ``parent=self``; every component ends with ``register_outputs``. The
components are built in the order their playbooks depend on each other (Fabric, then
SharedStorage, then SlurmPartition, then KubernetesPartition) and share one
:class:`Context`, so a playbook can wait for one in another component (slurm_compute
waits for nfs_client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from railyard.apply import machines, roles
from railyard.apply.playbooks import PlannedPlaybook
from railyard.apply.secrets import resolve_output
from railyard.compiler import Plan
from railyard.deploy.providers.key import Key
from railyard.deploy.providers.network import Network
from railyard.deploy.providers.node import Node
from railyard.deploy.providers.playbook import Playbook
from railyard.drivers import PodmanNode, RedfishNode, to_props

MUNGE_KEY_BYTES = 1024  # what `mungekey` makes by default
SLURMDBD_PASSWORD_BYTES = 32


@dataclass
class Context:
    plan: Plan
    root: str
    artifacts_dir: str
    planned: list[PlannedPlaybook]
    nodes: dict[str, Node] = field(default_factory=dict)
    playbooks: dict[str, Playbook] = field(default_factory=dict)
    secrets: dict[str, pulumi.Output[str]] = field(default_factory=dict)
    # role -> hosts where the drift check found the role would change something
    remediate: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def inventory(self) -> str:
        return f"{self.artifacts_dir}/ansible/inventory.json"


def declare_playbooks(ctx: Context, components: dict[str, pulumi.ComponentResource]) -> None:
    """Every planned playbook, in table order, as a child of its component."""
    for pb in ctx.planned:
        ctx.playbooks[pb.role] = Playbook(
            pb.role,
            roles=[pb.role],
            group=pb.group,
            hosts=list(pb.hosts),
            instances=pulumi.Output.all(**{h: ctx.nodes[h].instance for h in pb.hosts}),
            digest=pb.digest,
            inventory=ctx.inventory,
            artifacts_dir=ctx.artifacts_dir,
            root=ctx.root,
            vars=pb.vars,
            secret_vars={var: ctx.secrets[name] for var, name in pb.secrets},
            remediate=[h for h in ctx.remediate.get(pb.role, ()) if h in pb.hosts],
            opts=pulumi.ResourceOptions(
                parent=components[pb.component],
                depends_on=[*(ctx.playbooks[a] for a in pb.after), *(ctx.nodes[h] for h in pb.hosts)],
            ),
        )


def _roles(ctx: Context, component: str) -> list[str]:
    return [pb.role for pb in ctx.planned if pb.component == component]


class Fabric(pulumi.ComponentResource):
    """The machines and the wires: lab networks, one Node per machine, and the common role."""

    def __init__(self, name: str, ctx: Context, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("railyard:cluster:Fabric", name, None, opts)
        plan = ctx.plan
        self.networks = {
            spec.name: Network(spec.name.removeprefix(f"railyard-{plan.name}-"), spec,
                               opts=pulumi.ResourceOptions(parent=self))
            for spec in machines.lab_networks(plan)
        }
        for node in plan.nodes:
            spec = machines.node_spec(plan, node)
            props: dict[str, Any] = to_props(spec)
            deps: list[pulumi.Resource] = []
            if isinstance(spec, PodmanNode):
                deps = [self.networks[a.network] for a in spec.attachments]
            if isinstance(spec, RedfishNode):
                bmc = node.provision.bmc
                assert bmc is not None
                props["bmc"]["password"] = resolve_output(bmc.password.ref)
            ctx.nodes[node.name] = Node(node.name, props, pulumi.ResourceOptions(parent=self, depends_on=deps))

    def finish(self, ctx: Context) -> None:
        self.register_outputs({
            "networks": sorted(self.networks),
            "nodes": {name: node.address for name, node in ctx.nodes.items()},
            "roles": _roles(ctx, "fabric"),
        })


class SharedStorage(pulumi.ComponentResource):
    """NFS server and exports, NFS and Lustre client mounts."""

    def __init__(self, name: str, ctx: Context, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("railyard:cluster:SharedStorage", name, None, opts)

    def finish(self, ctx: Context) -> None:
        st = ctx.plan.storage
        self.register_outputs({
            "nfs_server": st.nfs_server,
            "exports": [e.path for e in st.exports],
            "mounts": {m.where: m.what for m in st.mounts},
            "roles": _roles(ctx, "storage"),
        })


class SlurmPartition(pulumi.ComponentResource):
    """munge (key generated once, kept secret), controller, compute, login, enroot, pyxis."""

    def __init__(self, name: str, ctx: Context, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("railyard:cluster:SlurmPartition", name, None, opts)
        slurm = ctx.plan.spec.partitions.slurm
        if slurm is not None and slurm.munge_key is not None:
            ctx.secrets["munge"] = resolve_output(slurm.munge_key.ref)  # base64, like the generated one
        else:
            key = Key("munge-key", "munge", MUNGE_KEY_BYTES, opts=pulumi.ResourceOptions(parent=self))
            ctx.secrets["munge"] = key.value
        acct = slurm.accounting if slurm is not None else None
        if acct is not None and acct.storage_password is not None:
            ctx.secrets["slurmdbd"] = resolve_output(acct.storage_password.ref)
        elif acct is not None:
            # hex: a password slurmdbd.conf and MariaDB both take as it is
            ctx.secrets["slurmdbd"] = Key("slurmdbd-password", "slurmdbd", SLURMDBD_PASSWORD_BYTES, "hex",
                                          opts=pulumi.ResourceOptions(parent=self)).value

    def finish(self, ctx: Context) -> None:
        s = ctx.plan.slurm
        assert s is not None
        self.register_outputs({
            "controller": s.controllers[0],
            "login": list(s.login),
            "partitions": {p.name: p.hostlist for p in s.partitions},
            "roles": _roles(ctx, "slurm"),
        })


class KubernetesPartition(pulumi.ComponentResource):
    """Control plane, workers, Kueue and Volcano (roles k8s_control_plane, k8s_worker,
    kueue, volcano); outputs say where the API server is and what queues it holds."""

    def __init__(self, name: str, ctx: Context, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("railyard:cluster:KubernetesPartition", name, None, opts)

    def finish(self, ctx: Context) -> None:
        k = ctx.plan.kubernetes
        assert k is not None
        cp = k.control_plane[0]
        api_port = roles.default(Path(ctx.root), "k8s_control_plane", "k8s_control_plane_api_port")
        self.summary: dict[str, Any] = {
            "control_plane": list(k.control_plane),
            "workers": list(k.workers),
            # one per control-plane node; every worker reaches them through its own haproxy
            "api_servers": pulumi.Output.all(*(ctx.nodes[n].address for n in k.control_plane)).apply(
                lambda addrs, port=api_port: [f"https://{a}:{port}" for a in addrs]),
            # root-only on the control-plane node; names cert files, holds no key
            "admin_kubeconfig": f"{cp}:/etc/kubernetes/admin.conf",
            "cluster_queues": [o["metadata"]["name"] for o in k.kueue if o["kind"] == "ClusterQueue"],
            "local_queues": [f"{o['metadata']['namespace']}/{o['metadata']['name']}"
                             for o in k.kueue if o["kind"] == "LocalQueue"],
        }
        self.register_outputs({**self.summary, "roles": _roles(ctx, "kubernetes")})

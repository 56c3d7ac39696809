"""From the plan to driver specs: which machine and which network each node gets. Pure.

Lab (podman) nodes get the management network with the plan's address and name, and one
interface per fabric leaf they are cabled to (``rail0``, ``rail1``, ...): a rail-optimized
SU shows up in ``ip addr`` as it is cabled. Rails carry no names and no routes (see
railyard.drivers.podman). NFS servers run privileged with their exports on podman
volumes (nfs-ganesha cannot export overlayfs), and the NFS clients get those volumes at
their mount points (the stand-in for a kernel NFS mount, which this kernel cannot do).
Kubernetes workers run privileged for their kubelet's containers, and so do Slurm compute
nodes of a spec with cgroups (slurmd writes the cgroup v1 hierarchies); stand-in GPUs become
character devices.
"""

from __future__ import annotations

from railyard.compiler import Plan
from railyard.compiler.inventory import container_name
from railyard.compiler.nodes import Node
from railyard.compiler.storage import systemd_escape_path
from railyard.drivers import Attachment, Bmc, NodeSpec, PodmanNode, RedfishNode, SshNode, Volume
from railyard.drivers.podman import NetworkSpec
from railyard.lab.image import IMAGE_REF


def mgmt_network_name(cluster: str) -> str:
    return f"railyard-{cluster}-mgmt"


def rail_network_name(cluster: str, leaf: str) -> str:
    return f"railyard-{cluster}-{leaf}"


def podman_nodes(plan: Plan) -> list[Node]:
    return [n for n in plan.nodes if n.provision.driver == "podman"]


def gateway(plan: Plan) -> str:
    """The lowest host address no node uses (the spec keeps addresses below first_host free)."""
    net = plan.spec.network.management.cidr
    used = {n.address for n in plan.nodes}
    return str(next(h for h in net.hosts() if str(h) not in used))


def leaves_of(plan: Plan) -> dict[str, list[str]]:
    """node -> the leaf switches it is cabled to, in fabric order."""
    if plan.fabric is None:
        return {}
    leaves = [s.name for s in plan.fabric.switches if s.tier == "leaf"]
    out: dict[str, list[str]] = {}
    for lower, upper, _count in plan.fabric.cables():
        if upper in leaves:
            out.setdefault(lower, [])
            if upper not in out[lower]:
                out[lower].append(upper)
    return {n: sorted(ls, key=leaves.index) for n, ls in out.items()}


def lab_networks(plan: Plan) -> list[NetworkSpec]:
    nodes = podman_nodes(plan)
    if not nodes:
        return []
    mgmt = plan.spec.network.management.cidr
    nets = [NetworkSpec(mgmt_network_name(plan.name), plan.name, subnet=str(mgmt), gateway=gateway(plan))]
    cabled = leaves_of(plan)
    used = sorted({leaf for n in nodes for leaf in cabled.get(n.name, [])},
                  key=[s.name for s in plan.fabric.switches].index if plan.fabric else None)
    nets += [NetworkSpec(rail_network_name(plan.name, leaf), plan.name, internal=True, dns=False) for leaf in used]
    return nets


def export_volume_name(cluster: str, server: str, path: str) -> str:
    return f"railyard-{cluster}-{server}-{systemd_escape_path(path)}"


def export_volumes(plan: Plan, node: Node) -> tuple[Volume, ...]:
    """The NFS server's exports: each on a podman volume (nfs-ganesha cannot export overlayfs)."""
    if plan.storage.nfs_server != node.name:
        return ()
    return tuple(Volume(export_volume_name(plan.name, node.name, e.path), e.path) for e in plan.storage.exports)


def nfs_stand_in_volumes(plan: Plan, node: Node) -> tuple[Volume, ...]:
    """The lab's stand-in for an NFS mount: this kernel has no NFS client, so a client node
    gets the server's export volume itself at the mount point. Jobs then share files through
    the same bytes the server exports (a container image, a program, /home). The mount
    units are still installed and verified by nfs_client; a real site mounts them."""
    server = plan.storage.nfs_server
    exported = {e.path for e in plan.storage.exports}
    out = []
    for m in plan.storage.mounts:
        export = m.what.partition(":")[2]
        if m.type == "nfs" and server and node.name in m.clients and export in exported:
            out.append(Volume(export_volume_name(plan.name, server, export), m.where, owner=server))
    return tuple(out)


def node_spec(plan: Plan, node: Node) -> NodeSpec:
    """The driver spec of a node. Redfish passwords are left empty: the program fills them in."""
    provision = node.provision
    cluster = plan.name
    if provision.driver == "ssh":
        return SshNode(name=node.name, cluster=cluster, address=node.address, user=provision.ssh_user)
    if provision.driver == "redfish":
        assert provision.bmc is not None
        b = provision.bmc
        return RedfishNode(
            name=node.name, cluster=cluster, address=node.address,
            bmc=Bmc(address=b.address.format(name=node.name), username=b.username,
                    system_id=b.system_id or "", verify_tls=b.verify_tls),
        )
    domain = plan.spec.cluster.domain
    attachments = [Attachment(mgmt_network_name(cluster), "eth0", node.address, (node.name, f"{node.name}.{domain}"))]
    attachments += [
        Attachment(rail_network_name(cluster, leaf), f"rail{i}")
        for i, leaf in enumerate(leaves_of(plan).get(node.name, []))
    ]
    gpus = plan.inventory.hostvars[node.name].get("railyard_gpus") or {}
    slurm = plan.spec.partitions.slurm
    # slurmd confines jobs with cgroups (v1 here), which must be writable: a privileged
    # container. Its stand-in GPUs are then made by slurm_compute (mknod, 195:N): each its
    # own device, so ConstrainDevices hides the ones a job was not given (all of them bound
    # to /dev/null would deny /dev/null itself to every job without a GPU).
    confined = "slurm_compute" in node.roles and slurm is not None and slurm.cgroups
    devices = tuple(gpus.get("devices", ())) if gpus.get("stand_in") and not confined else ()
    volumes = export_volumes(plan, node) + nfs_stand_in_volumes(plan, node)
    return PodmanNode(
        name=node.name,
        cluster=cluster,
        address=node.address,
        container=container_name(cluster, node.name),
        image=IMAGE_REF,
        attachments=tuple(attachments),
        # nfs-ganesha's open_by_handle_at; a real kubelet's runc makes namespaces and cgroups;
        # slurmd's cgroups
        privileged="nfs_server" in node.roles or "k8s_worker" in node.roles or confined,
        devices=devices,
        volumes=volumes,
    )

"""What the collectors saw, per layer, parsed but not judged: the input of :func:`compare`.

A layer that is ``None`` in :class:`Observed` was not collected (not asked for, or its
collector failed: then :attr:`Observed.errors` says why). A host that could not be reached
is an :class:`Unreachable` inside its layer, never an empty observation.

Everything here is plain frozen data, so recorded observations (tests/drift/fixtures) and
live ones go through the same :func:`~railyard.drift.compare.compare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from railyard.drift.model import CheckError

# --------------------------------------------------------------------------- common


@dataclass(frozen=True, slots=True)
class Unreachable:
    host: str
    reason: str


# --------------------------------------------------------------------------- slurm


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One ``scontrol show node`` record, the fields drift compares."""

    name: str
    state: str  # as printed: IDLE, IDLE+DRAIN, DOWN+NOT_RESPONDING, UNKNOWN+DRAIN+INVALID_REG
    reason: str = ""  # without the trailing [user@time]
    reason_by: str = ""  # user@time, when Slurm printed it
    partitions: tuple[str, ...] = ()
    cpus: int | None = None  # CPUTot
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    real_memory: int | None = None
    gres: str = ""  # gpu:standin:2; "" for (null)

    @property
    def state_tokens(self) -> tuple[str, ...]:
        """``IDLE*+DRAIN`` -> (IDLE, NOT_RESPONDING, DRAIN): sinfo's ``*`` spelled out."""
        out: list[str] = []
        for tok in self.state.split("+"):
            if tok.endswith("*"):
                out += [tok.rstrip("*"), "NOT_RESPONDING"]
            elif tok:
                out.append(tok)
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class SlurmSwitch:
    """One ``scontrol show topology`` record (topology/tree)."""

    name: str
    level: int
    link_speed: str
    nodes: tuple[str, ...] = ()  # every node below, for upper levels too
    switches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmBlock:
    """One ``scontrol show topology`` record (topology/block, Slurm 23.11+)."""

    name: str
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmPartition:
    """One ``scontrol show partition`` record, the fields the compiler sets."""

    name: str
    nodes: tuple[str, ...]
    default: bool
    max_time: str  # as printed: 1-00:00:00, UNLIMITED
    default_time: str  # NONE when unset
    state: str  # UP, DOWN, DRAIN, INACTIVE
    job_defaults: tuple[tuple[str, str], ...] = ()  # (DefCpuPerGPU, 1), ...


@dataclass(frozen=True)
class SlurmObservation:
    """The live controller's view. With ``unreachable`` or ``failure`` set nothing else is."""

    controller: str
    nodes: tuple[SlurmNode, ...] = ()
    partitions: tuple[SlurmPartition, ...] = ()
    switches: tuple[SlurmSwitch, ...] = ()
    blocks: tuple[SlurmBlock, ...] = ()
    unreachable: Unreachable | None = None  # the controller host did not answer
    failure: str = ""  # the host answered, scontrol did not (slurmctld down, not installed)

    @property
    def registered(self) -> tuple[str, ...]:
        """Every node name Slurm knows, whether the spec has it or not."""
        return tuple(n.name for n in self.nodes)


# --------------------------------------------------------------------------- files

Change = Literal["modified", "created", "removed", "attributes", "hidden", "service", "task",
                 "object_created", "object_modified"]  # object_*: an API object, path Kind/[ns/]name


@dataclass(frozen=True, slots=True)
class FileChange:
    """What one role task would change on one host (Ansible check mode with diff).

    ``expected`` are the plan's lines (or attributes) the host lacks, ``observed`` the
    host's lines the plan does not have; a few of each, never the whole file.
    """

    host: str
    role: str
    task: str
    change: Change
    path: str = ""  # file, directory or unit; "" when Ansible hid it (no_log)
    plan_only: int = 0  # lines only in the plan's version
    host_only: int = 0  # lines only on the host
    expected: tuple[str, ...] = ()
    observed: tuple[str, ...] = ()
    module: str = ""


@dataclass(frozen=True, slots=True)
class TaskFailure:
    host: str
    role: str
    task: str
    message: str


@dataclass(frozen=True)
class FilesObservation:
    hosts: tuple[str, ...]  # every host some checked role targets
    roles: tuple[str, ...]  # the roles that were checked
    changes: tuple[FileChange, ...] = ()
    failures: tuple[TaskFailure, ...] = ()
    unreachable: tuple[Unreachable, ...] = ()


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class UnitState:
    """One systemd unit as ``systemctl show`` reports it, and what the plan's role wants of it.

    ``want`` is ``active`` (running and enabled: munge, slurmd, slurmctld) or ``enabled``
    (installed and enabled; whether it runs is the host's call, e.g. an NFS mount on a
    kernel without NFS, as in the lab).
    """

    unit: str
    want: str  # active | enabled
    active: str = ""  # ActiveState: active, inactive, failed, activating, ...
    sub: str = ""  # SubState: running, dead, exited, mounted, ...
    file_state: str = ""  # UnitFileState: enabled, disabled, static, "" when there is no unit file
    load: str = ""  # LoadState: loaded, not-found, masked, ...
    role: str = ""  # the role that keeps it so
    log: str = ""  # a unit that should run and does not: the last lines of its journal


@dataclass(frozen=True, slots=True)
class NodeObservation:
    """A node as its driver sees it (:class:`railyard.drivers.NodeState`), plus its units."""

    name: str
    driver: str  # podman | ssh | redfish
    handle: str  # what the driver addresses: container name, ssh target, BMC URL
    exists: bool
    power: str  # on | off | unknown
    reachable: bool
    detail: str = ""
    # The units the plan's roles keep running or enabled; empty when the node could not be asked.
    services: tuple[UnitState, ...] = ()


@dataclass(frozen=True)
class NodesObservation:
    nodes: tuple[NodeObservation, ...]


# --------------------------------------------------------------------------- kubernetes


@dataclass(frozen=True, slots=True)
class NodeVersions:
    """A Node's ``.status.nodeInfo``: what its agent reports running (the kubelet fills it
    in at every status update; a KWOK Node says whatever its object says)."""

    kubelet: str = ""  # kubeletVersion: v1.35.4
    runtime: str = ""  # containerRuntimeVersion: containerd://1.6.20~ds1


@dataclass(frozen=True, slots=True)
class EtcdMember:
    """One member of ``/v3/cluster/member/list``, and what its own ``/health`` said.

    A member that was added but never started has no name and no client URLs.
    """

    id: str  # as etcd prints it: a uint64 in decimal
    name: str = ""
    peer_urls: tuple[str, ...] = ()
    client_urls: tuple[str, ...] = ()
    learner: bool = False
    healthy: bool | None = None  # None: not asked (no client URL)
    health: str = ""  # why not healthy: etcd's reason, or why its /health did not answer


@dataclass(frozen=True)
class EtcdObservation:
    """etcd's member list as one control-plane node's etcd answers it.

    ``failure``: the node answered, etcd did not (drift: the plan has it running);
    ``tls``: it failed on TLS (the probe's certificate files, or the handshake), so etcd
    may well run. ``unreadable``: what came back was not the probe's JSON (the check is
    incomplete).
    """

    host: str
    endpoint: str = ""
    members: tuple[EtcdMember, ...] = ()
    failure: str = ""
    unreadable: str = ""
    tls: bool = False


@dataclass(frozen=True)
class DnsObservation:
    """The cluster DNS Deployment (kube-system/coredns) as the apiserver reports it."""

    found: bool
    desired: int = 0  # .spec.replicas
    available: int = 0  # .status.availableReplicas: Ready pods that answer


@dataclass(frozen=True)
class KubernetesObservation:
    """The API server's view. ``deployed=False``: there is nothing to compare yet."""

    deployed: bool
    reason: str = ""  # why not deployed
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> labels
    capacity: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> .status.capacity
    allocatable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node -> .status.allocatable
    objects: tuple[Mapping[str, Any], ...] = ()  # Kueue and Volcano objects as the API returns them
    versions: Mapping[str, NodeVersions] = field(default_factory=dict)  # node -> .status.nodeInfo
    etcd: EtcdObservation | None = None  # None: not asked
    dns: DnsObservation | None = None  # None: not asked
    host: str = ""  # the control-plane node that answered all of the above
    unanswered: tuple[Unreachable, ...] = ()  # the control-plane nodes asked before it, which did not answer
    # node -> containerRuntimeVersion when `railyard up` last finished (railyard.drift.applied);
    # None with ``applied_record`` set: no record there; ``applied_record`` "": not looked for.
    applied_runtimes: Mapping[str, str] | None = None
    applied_record: str = ""


# --------------------------------------------------------------------------- all


@dataclass(frozen=True)
class Observed:
    slurm: SlurmObservation | None = None
    files: FilesObservation | None = None
    nodes: NodesObservation | None = None
    kubernetes: KubernetesObservation | None = None
    errors: tuple[CheckError, ...] = ()  # collectors that failed: their layer is None
    notes: tuple[str, ...] = ()  # what was not checked and why (missing roles, ...)
    # Seconds each layer took to collect: for benchmarks, never part of the report.
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(
            name for name in ("nodes", "files", "slurm", "kubernetes") if getattr(self, name) is not None
        )

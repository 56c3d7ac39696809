"""The cluster spec: the one file a user edits (``inventories/<env>/cluster.yaml``).

Two passes: pydantic checks the shape of every field (``extra='forbid'``, types, ranges),
then :mod:`railyard.compiler.validate` checks the rules that span fields (ports, partitions,
addresses, quotas). Both report YAML paths with line numbers and say what to change.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from railyard import builds
from railyard.errors import Problem, SpecError
from railyard.fieldtypes import (
    MAX_HOSTS,
    MAX_NAMED,
    AbsPath,
    AptName,
    BmcUrl,
    BmcUser,
    Description,
    DeviceList,
    DnsName,
    Domain,
    EnrootPath,
    ExportOption,
    GpuType,
    GraceSeconds,
    GroupName,
    Hostlist,
    Hostname,
    IPv4Addr,
    IPv4Net,
    MountOption,
    MountPath,
    Name,
    NicName,
    NodeName,
    OverTimeMinutes,
    Pattern,
    ReleaseUrl,
    SlurmAccountName,
    SystemId,
    Url,
    UserName,
    Version3,
    Words,
    device_count,
    hostlist_size,
    slurm_minutes,
)

SLURM_VERSIONS = ("22.05", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
SlurmVersion = Literal["22.05", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]

# Name: a DNS-1123 label (Slurm, group and Kubernetes names). Hostlist: Slurm/ClusterShell
# syntax, e.g. "gpu[001-032],kw1", sized before it is expanded (railyard.fieldtypes).
# A reference to a secret, never the secret itself: env:VAR, file:/path, or pulumi:configKey.
SECRET_REF = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/\S+|pulumi:[A-Za-z][A-Za-z0-9_.:-]*)$")
SLURM_TIME = re.compile(r"^(INFINITE|UNLIMITED|\d+|\d+:\d{2}(:\d{2})?|\d+-\d+(:\d{2}(:\d{2})?)?)$")


def version_at_least(version: str, minimum: str) -> bool:
    """'24.11' >= '24.05'; dotted numbers, compared as numbers."""
    return tuple(int(x) for x in version.split(".")) >= tuple(int(x) for x in minimum.split("."))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(Strict):
    """Wraps a secret reference so a plain-text secret is caught wherever one is expected."""

    ref: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not SECRET_REF.fullmatch(value):
                raise ValueError(
                    "looks like a plain-text secret; write a reference instead: "
                    "'env:VAR_NAME', 'file:/path/to/secret' or 'pulumi:configKey' "
                    "(set it with `pulumi config set --secret configKey`)"
                )
            return {"ref": value}
        return value


# ---------------------------------------------------------------- cluster and network


class Versions(Strict):
    slurm: SlurmVersion = "24.11"  # Debian 13 (trixie) and what sites run; 22.05 is past its end of life
    # the releases railyard installs (railyard/builds.py: what scripts/build-k8s.sh builds)
    kubernetes: Annotated[str, Field(pattern=r"^1\.\d{2}$")] = builds.kubernetes_minor()
    kueue: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+$")] = builds.KUEUE
    volcano: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+$")] = builds.VOLCANO


class ClusterMeta(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
    domain: Domain
    versions: Versions = Versions()


class ManagementNetwork(Strict):
    cidr: IPv4Net
    # Offset inside the CIDR of the first address handed out; lower ones stay free for
    # gateways and services.
    first_host: Annotated[int, Field(ge=1)] = 10


class Network(Strict):
    management: ManagementNetwork


# ---------------------------------------------------------------- nodes


class Gpus(Strict):
    type: GpuType
    count: Annotated[int, Field(ge=1, le=16)]
    # Device files for gres.conf File=; default /dev/nvidia[0-<count-1>].
    devices: DeviceList | None = None
    # Lab only: create stand-in character devices so GRES allocation runs for real
    # without GPUs. Never set on real hardware.
    stand_in: bool = False

    @model_validator(mode="after")
    def _one_device_per_gpu(self) -> Gpus:
        if self.devices is not None and device_count(self.devices) != self.count:
            raise ValueError(
                f"devices {self.devices!r} names {device_count(self.devices)} device(s) but count is "
                f"{self.count}; list one device per GPU (e.g. '/dev/nvidia[0-{self.count - 1}]') "
                "or fix count"
            )
        return self


class Hardware(Strict):
    sockets: Annotated[int, Field(ge=1, le=16)]
    cores_per_socket: Annotated[int, Field(ge=1, le=512)]
    threads_per_core: Annotated[int, Field(ge=1, le=8)] = 1
    memory_mb: Annotated[int, Field(ge=256)]
    gpus: Gpus | None = None
    # Fabric NICs (one per rail). Management NICs are not counted.
    nics: Annotated[int, Field(ge=0, le=32)] = 0
    nic_names: list[NicName] | None = None  # RDMA device names, e.g. mlx5_0; for NCCL_IB_HCA

    @model_validator(mode="after")
    def _a_name_per_rail(self) -> Hardware:
        if self.nic_names is not None:
            if len(self.nic_names) != self.nics:
                raise ValueError(
                    f"nic_names lists {len(self.nic_names)} name(s) but nics is {self.nics}; name "
                    "every fabric NIC once (NCCL_IB_HCA would leave a rail unused or name one too many)"
                )
            dups = sorted({n for n in self.nic_names if self.nic_names.count(n) > 1})
            if dups:
                raise ValueError(f"nic_names lists {', '.join(dups)} twice; name each NIC once")
        return self

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core


class Bmc(Strict):
    # "{name}" is replaced by the node name, e.g. https://{name}-bmc.mgmt.example
    address: BmcUrl
    username: BmcUser
    password: SecretRef
    system_id: SystemId | None = None
    verify_tls: bool = True


class Provision(Strict):
    driver: Literal["podman", "ssh", "redfish"] = "podman"
    ssh_user: UserName = "root"
    bmc: Bmc | None = None

    @model_validator(mode="after")
    def _bmc_for_redfish(self) -> Provision:
        if self.driver == "redfish" and self.bmc is None:
            raise ValueError("driver 'redfish' needs a 'bmc' block (address, username, password)")
        if self.driver != "redfish" and self.bmc is not None:
            raise ValueError(f"'bmc' is only used by driver 'redfish', not '{self.driver}'")
        return self


class NodeGroup(Strict):
    group: Name
    # Either a hostlist of names, or a pattern with {index} and a count.
    names: Hostlist | None = None
    pattern: Pattern | None = None
    count: Annotated[int, Field(ge=1, le=MAX_HOSTS)] | None = None
    start: Annotated[int, Field(ge=0)] = 1
    hardware: Hardware
    # Pin the first address of this group so growing an earlier group never renumbers it.
    first_address: IPv4Addr | None = None
    addresses: dict[Hostname, IPv4Addr] = {}
    provision: Provision = Provision()
    # Spares: cabled, provisioned and in the inventory (Ansible group 'spare'), but in no
    # scheduler: no partition, no Kubernetes role, no Slurm block or HyperNode. To put one
    # in service, move it to a group without spare (docs/user-guide.md, "Spare nodes").
    spare: bool = False
    # What runs pods on this group's Kubernetes workers: a real kubelet with containerd, or
    # KWOK, a simulated kubelet (Nodes that run nothing: simulation and scale tests only).
    # KWOK is never implied; a group asks for it.
    agent: Literal["kubelet", "kwok"] = "kubelet"

    @model_validator(mode="after")
    def _names_or_pattern(self) -> NodeGroup:
        if self.names is not None and (self.pattern is not None or self.count is not None):
            raise ValueError("give either 'names' or 'pattern' with 'count', not both")
        if self.names is None and (self.pattern is None or self.count is None):
            raise ValueError("give 'names' (a hostlist) or 'pattern' and 'count'")
        return self

    def hostnames(self) -> list[str]:
        from railyard.hostlist import expand

        if self.names is not None:
            return expand(self.names)
        assert self.pattern is not None and self.count is not None
        return [self.pattern.format(index=i) for i in range(self.start, self.start + self.count)]


# ---------------------------------------------------------------- fabric


class NvLink(Strict):
    """NVLink domains (e.g. GB200 NVL72: 18 nodes of 4 GPUs per domain)."""

    domain_nodes: Annotated[int, Field(ge=1)] | None = None  # rail-optimized: domains tile each SU
    domains: list[NvLinkDomain] | None = None  # explicit fabrics: listed domains
    # Slurm BlockSizes. The first is the base block: the Slurm nodes of the largest domain.
    # Default: that, doubled while the aggregated blocks Slurm forms stay inside one SU
    # (compiler.slurm.block_layout).
    block_sizes: list[Annotated[int, Field(ge=1)]] | None = None


class NvLinkDomain(Strict):
    name: Name
    nodes: Hostlist


class Spines(Strict):
    count: Annotated[int, Field(ge=1)]
    radix: Annotated[int, Field(ge=2)] = 64
    links_per_leaf: Annotated[int, Field(ge=1)] = 1  # parallel links from every leaf to each spine


class Core(Strict):
    count: Annotated[int, Field(ge=1)]
    radix: Annotated[int, Field(ge=2)] = 64
    links_per_spine: Annotated[int, Field(ge=1)] = 1
    sus_per_group: Annotated[int, Field(ge=1)]  # SUs that share one group of spines


class ScalableUnit(Strict):
    name: Name
    nodes: Hostlist


class RailOptimized(Strict):
    rails: Annotated[int, Field(ge=1, le=16)]
    # Either scalable_units listed by name, or nodes cut into SUs of nodes_per_su.
    scalable_units: list[ScalableUnit] | None = None
    nodes: Hostlist | None = None
    nodes_per_su: Annotated[int, Field(ge=1)] | None = None
    leaf_radix: Annotated[int, Field(ge=2)] = 64
    spines: Spines
    core: Core | None = None
    nvlink: NvLink | None = None

    @model_validator(mode="after")
    def _one_way_to_name_sus(self) -> RailOptimized:
        listed = self.scalable_units is not None
        chunked = self.nodes is not None or self.nodes_per_su is not None
        if listed == chunked:
            raise ValueError(
                "give either 'scalable_units' (a list of name + nodes) or 'nodes' with "
                "'nodes_per_su', exactly one of the two"
            )
        if chunked and (self.nodes is None or self.nodes_per_su is None):
            raise ValueError("'nodes' and 'nodes_per_su' go together")
        return self


class Switch(Strict):
    name: Name
    tier: Literal["leaf", "spine", "core"]
    radix: Annotated[int, Field(ge=2)]
    # The Slurm/Kubernetes group this switch belongs to; switches that share nodes are one
    # group anyway (the rails of an SU), this only names it.
    group: Name | None = None


class Link(Strict):
    a: str  # node name or switch name
    b: str  # switch name
    count: Annotated[int, Field(ge=1)] = 1


class Explicit(Strict):
    switches: list[Switch]
    links: list[Link]
    nvlink: NvLink | None = None


class Fabric(Strict):
    link_speed: Literal["200G", "400G", "800G"]
    rail_optimized: RailOptimized | None = None
    explicit: Explicit | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Fabric:
        if (self.rail_optimized is None) == (self.explicit is None):
            raise ValueError("give exactly one of 'rail_optimized' or 'explicit'")
        return self


# ---------------------------------------------------------------- Slurm partition


class PackageSource(Strict):
    """Where a package comes from; exactly one of url, path, apt."""

    url: Url | None = None
    path: AbsPath | None = None
    apt: AptName | None = None  # package name from an apt repository the node already has

    @model_validator(mode="after")
    def _exactly_one(self) -> PackageSource:
        given = [k for k in ("url", "path", "apt") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of 'url', 'path' or 'apt'")
        return self


class SlurmPartitionDef(Strict):
    name: Name
    nodes: Hostlist
    default: bool = False
    max_time: str = "INFINITE"
    default_time: str | None = None
    def_cpu_per_gpu: Annotated[int, Field(ge=1)] | None = None
    def_mem_per_gpu_mb: Annotated[int, Field(ge=1)] | None = None
    # GraceTime: seconds a job selected for preemption keeps running after SIGTERM. Slurm
    # reads it only with PreemptType=preempt/partition_prio (docs/user-guide.md).
    grace_time: GraceSeconds | None = None
    # topology.yaml (25.05+): which topology this partition schedules by.
    topology: Literal["fabric", "nvlink", "flat"] | None = None
    # Partition QOS (a QOS of partitions.slurm.accounting.qos): its limits apply to every
    # job in the partition, on top of the job's own QOS.
    qos: SlurmAccountName | None = None

    @field_validator("max_time", "default_time")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None and not SLURM_TIME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Slurm time; use INFINITE, minutes, 'h:m:s' or 'd-h:m:s'"
            )
        return value

    @model_validator(mode="after")
    def _default_within_max(self) -> SlurmPartitionDef:
        if self.default_time is not None and slurm_minutes(self.default_time) > slurm_minutes(self.max_time):
            raise ValueError(
                f"default_time {self.default_time} is longer than max_time {self.max_time}; a job "
                "that takes the default would be refused: lower default_time or raise max_time"
            )
        return self


class Pyxis(Strict):
    enabled: bool = True
    version: Version3 = "0.24.0"
    runtime_path: AbsPath = "/run/pyxis"
    execute_entrypoint: bool = False
    container_scope: Literal["global", "job"] = "global"
    sbatch_support: bool = True
    package: PackageSource | None = None


class Enroot(Strict):
    enabled: bool = True
    version: Version3 = "4.1.2"
    runtime_path: EnrootPath = "/run/enroot/user-$(id -u)"
    cache_path: EnrootPath = "/var/lib/enroot/cache/group-$(id -g)"
    data_path: EnrootPath = "/var/lib/enroot/data/user-$(id -u)"
    squash_options: Words = "-comp lzo -noD -exit-on-error"
    mount_home: bool = False
    restrict_dev: bool = True
    remap_root: bool = False
    package: PackageSource | None = None


# Trackable resources an accounting limit may name: those slurm.conf tracks
# (AccountingStorageTRES adds gres/gpu; cpu, mem, node, billing are always tracked).
TRES_NAMES = ("cpu", "mem", "node", "billing", "gres/gpu")
_TRES_TYPED = re.compile(r"^gres/gpu:[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


def _tres(value: Any) -> Any:
    """{gres/gpu: 8, cpu: 64}: each name a TRES slurm.conf tracks, each count whole and >= 0."""
    if not isinstance(value, dict):
        return value
    for name, count in value.items():
        if not isinstance(name, str) or not (name in TRES_NAMES or _TRES_TYPED.fullmatch(name)):
            raise ValueError(
                f"{name!r} is not a TRES this cluster tracks; use one of {', '.join(TRES_NAMES)} "
                "or gres/gpu:<type> (mem in MB)")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{name}: {count!r} is not a count; write a whole number >= 0")
    return value


Tres = Annotated[dict[str, int], BeforeValidator(_tres)]


def _shares(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise ValueError(f"{value} shares: fairshare is the shares among siblings in Slurm's Fair Tree, a whole "
                         "number of at least 1 (an association with none would never be preferred); write 1 or more")
    return value


Shares = Annotated[int, BeforeValidator(_shares), Field(ge=1, le=999_999_999)]


class Qos(Strict):
    """A Slurm QOS (sacctmgr add qos): its priority and limits."""

    name: SlurmAccountName
    priority: Annotated[int, Field(ge=0, le=4_294_967_294)] = 0
    grp_tres: Tres = {}  # all running jobs in this QOS together
    max_tres_per_user: Tres = {}
    max_tres_per_job: Tres = {}
    max_jobs_per_user: Annotated[int, Field(ge=0)] | None = None
    max_submit_jobs_per_user: Annotated[int, Field(ge=0)] | None = None
    max_wall: str | None = None

    @field_validator("max_wall")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None and not SLURM_TIME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slurm time; use INFINITE, minutes, 'h:m:s' or 'd-h:m:s'")
        return value


class Account(Strict):
    """A Slurm account: a node of the account tree under root, with its fair-share shares."""

    name: SlurmAccountName
    parent: SlurmAccountName = "root"
    fairshare: Shares = 1  # shares among its siblings
    grp_tres: Tres = {}  # all running jobs of the account and its children together
    max_tres_per_job: Tres = {}
    max_jobs: Annotated[int, Field(ge=0)] | None = None  # running jobs per user in it
    qos: list[SlurmAccountName] = []  # QOS its users may ask for (default: Slurm's normal)
    default_qos: SlurmAccountName | None = None


class AccountingUser(Strict):
    """A user's associations: a default account and any others, with their shares."""

    name: UserName
    default_account: SlurmAccountName
    accounts: list[SlurmAccountName] = []  # further accounts they may charge
    fairshare: Shares = 1
    max_jobs: Annotated[int, Field(ge=0)] | None = None
    grp_tres: Tres = {}


class Priority(Strict):
    """priority/multifactor, on whenever accounting is: the weights and fair-share decay."""

    weight_fairshare: Annotated[int, Field(ge=0, le=4_294_967_294)] = 10000
    weight_age: Annotated[int, Field(ge=0, le=4_294_967_294)] = 1000
    weight_qos: Annotated[int, Field(ge=0, le=4_294_967_294)] = 1000
    weight_job_size: Annotated[int, Field(ge=0, le=4_294_967_294)] = 0
    weight_partition: Annotated[int, Field(ge=0, le=4_294_967_294)] = 0
    decay_half_life: str = "7-0"  # PriorityDecayHalfLife
    calc_period: Annotated[int, Field(ge=1, le=1440)] = 5  # PriorityCalcPeriod, minutes
    max_age: str = "7-0"  # PriorityMaxAge

    @field_validator("decay_half_life", "max_age")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not SLURM_TIME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slurm time; use minutes, 'h:m:s' or 'd-h[:m[:s]]', e.g. '7-0'")
        return value


class Accounting(Strict):
    """slurmdbd and its database, and the associations railyard keeps in it.

    The spec is the whole truth: accounts, users and QOS it does not list are removed
    (root and the QOS normal excepted)."""

    host: NodeName  # node running slurmdbd (a controller, or a node of its own)
    # MariaDB: the slurmdbd node itself (railyard installs it there) or a server the site runs
    storage_host: DnsName
    storage_port: Annotated[int, Field(ge=1, le=65535)] = 3306
    storage_user: UserName = "slurm"
    storage_loc: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")] = "slurm_acct_db"
    # default: generated once and kept as a Pulumi secret (a site's own DB names its own)
    storage_password: SecretRef | None = None
    # AccountingStorageEnforce: associations, limits, qos and safe make the limits apply
    enforce: list[Literal["associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps"]] = [
        "associations", "limits", "qos", "safe"]
    priority: Priority = Priority()
    qos: list[Qos] = []
    accounts: list[Account] = []
    users: list[AccountingUser] = []


class PamSlurmAdopt(Strict):
    """Who may ssh to a compute node (pam_slurm_adopt in sshd's PAM stack): a user with a job
    there, whose session joins the job's cgroup and ends with it; root and admin_group
    always (pam_access). Needs cgroups: the session is adopted into the job's cgroup."""

    admin_group: GroupName  # a group of the site's directory; railyard does not create it


class Slurm(Strict):
    controllers: Hostlist
    login: Hostlist | None = None
    partitions: list[SlurmPartitionDef] = Field(min_length=1)
    topology: Literal["auto", "tree", "block", "yaml"] = "auto"
    # Real clusters confine jobs with cgroups; lab containers cannot.
    cgroups: bool = True
    mpi_default: Literal["none", "pmix", "pmi2"] = "none"
    # Seconds a --switches=N@T job may wait for its placement (Slurm's default is 300).
    max_switch_wait: Annotated[int, Field(ge=0)] = 1800
    # OverTimeLimit: minutes a job may run past its time limit before Slurm cancels it
    # (cluster-wide); room for a checkpoint that started late (docs/user-guide.md).
    over_time_limit: OverTimeMinutes | None = None
    gres_autodetect: Literal["off", "nvml", "nvidia"] = "off"
    # How nodes get slurm.conf: "configless" (slurmd fetches it from slurmctld, login nodes
    # run sackd, which is new in Slurm 23.11) or "files" (every node gets the files).
    # Default: configless from Slurm 24.11, files before (compiler.slurm.config_delivery).
    config_delivery: Literal["configless", "files"] | None = None
    accounting: Accounting | None = None
    pam_slurm_adopt: PamSlurmAdopt | None = None  # None: sshd on compute nodes is left as it is
    munge_key: SecretRef | None = None  # default: generated once and kept as a Pulumi secret
    pyxis: Pyxis = Pyxis()
    enroot: Enroot = Enroot()


# ---------------------------------------------------------------- Kubernetes partition


class Resources(Strict):
    cpu: Annotated[int, Field(ge=0)] | None = None
    memory_mb: Annotated[int, Field(ge=0)] | None = None
    gpu: Annotated[int, Field(ge=0)] | None = None


class ResourceQuota(Resources):
    """A ClusterQueue's nominal quota on one flavor, and what it may borrow from its cohort
    beyond it and lend to the cohort out of it (Kueue's borrowingLimit and lendingLimit; a
    resource left out has no limit). Limits need the queue to be in a cohort."""

    borrowing_limit: Resources | None = None
    lending_limit: Resources | None = None


# Kueue's ClusterQueue .spec.preemption policies (kueue.x-k8s.io/v1beta2, Kueue 0.17).
WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
BorrowWithinCohort = Literal["Never", "LowerPriority"]


class Preemption(Strict):
    """When a pending workload may evict admitted ones (Kueue's ClusterQueue preemption).

    within_cluster_queue: evict lower-priority workloads of the same queue.
    reclaim_within_cohort: take back nominal quota that other queues of the cohort borrowed.
    borrow_within_cohort: evict lower-priority workloads of other queues while borrowing;
    borrow_max_priority names a priority class: only workloads at or below its value may be
    evicted that way.
    """

    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    borrow_within_cohort: BorrowWithinCohort = "Never"
    borrow_max_priority: Name | None = None


# Kueue's fair-sharing weight: a queue (or cohort) with weight 2 gets twice the share of
# unused cohort quota of one with weight 1. Kueue takes it as a quantity; here a decimal.
Weight = Annotated[float, Field(gt=0, le=1_000_000)]


class Cohort(Strict):
    name: Name
    parent: Name | None = None
    fair_sharing_weight: Weight | None = None


class ClusterQueue(Strict):
    name: Name
    cohort: Name | None = None
    namespaces: list[Name] | None = None  # None: every namespace
    # Per flavor (GPU type, or "cpu" for nodes without GPUs); default: all the partition has.
    quotas: dict[str, ResourceQuota] | None = None
    preemption: Preemption | None = None
    fair_sharing_weight: Weight | None = None


class LocalQueue(Strict):
    name: Name
    namespace: Name
    cluster_queue: Name


class Kueue(Strict):
    enabled: bool = True
    # Fair sharing of unused cohort quota by the queues' weights, with preemption to keep
    # it fair (the manager's fairSharing; preemption strategies LessThanOrEqualToFinalShare,
    # then LessThanInitialShare, Kueue's default pair).
    fair_sharing: bool = False
    cohorts: list[Cohort] = []
    cluster_queues: list[ClusterQueue] = []
    local_queues: list[LocalQueue] = []


class VolcanoQueue(Strict):
    name: Name
    weight: Annotated[int, Field(ge=1, le=65535)] = 1
    reclaimable: bool = True


class Volcano(Strict):
    enabled: bool = True
    queues: list[VolcanoQueue] = []


class PodNetwork(Strict):
    """Addresses of the Kubernetes partition's pods and Services.

    Each worker gets one ``/node_prefix`` of ``pod_cidr`` (its Node's podCIDR, from which
    its CNI bridge hands out pod addresses); every node routes the other workers' blocks to
    them. Services get ClusterIPs from ``service_cidr``; the cluster DNS (CoreDNS) is its
    tenth address, as kubeadm places it.
    """

    pod_cidr: IPv4Net = ipaddress.IPv4Network("10.244.0.0/16")
    # A kubelet admits 110 pods: a /25 (126 addresses) is the smallest block that holds them.
    node_prefix: Annotated[int, Field(ge=16, le=25)] = 24
    # The apiserver refuses a Service range wider than /12.
    service_cidr: IPv4Net = ipaddress.IPv4Network("10.96.0.0/16")
    dns_domain: Domain = "cluster.local"


class PriorityClass(Strict):
    """One priority for both schedulers: a Kueue WorkloadPriorityClass (a job's label
    ``kueue.x-k8s.io/priority-class``) and a Kubernetes PriorityClass of the same name and
    value (a pod's or Volcano PodGroup's ``priorityClassName``). preempts: false makes the
    PriorityClass's preemptionPolicy Never (it waits, and evicts nothing)."""

    name: Name
    # Kubernetes reserves values above one billion for system classes.
    value: Annotated[int, Field(ge=-2_147_483_648, le=1_000_000_000)]
    description: Description | None = None
    preempts: bool = True


class Kubernetes(Strict):
    control_plane: Hostlist
    workers: Hostlist
    priority_classes: list[PriorityClass] = []
    label_prefix: Domain = "topology.railyard.dev"
    network: PodNetwork = PodNetwork()
    # Where the nodes download the Kubernetes release binaries: a mirror laid out like
    # https://dl.k8s.io/release (<url>/v<version>/bin/linux/amd64/<binary> and <binary>.sha256
    # next to each). None: dl.k8s.io itself (the roles' default).
    release_url: ReleaseUrl | None = None
    kueue: Kueue = Kueue()
    volcano: Volcano = Volcano()


class Partitions(Strict):
    slurm: Slurm | None = None
    kubernetes: Kubernetes | None = None


# ---------------------------------------------------------------- storage

# Normalised, absolute, never a system path (railyard.fieldtypes.MountPath).
MountPoint = MountPath


class NfsExport(Strict):
    path: MountPoint
    clients: IPv4Net | None = None  # default: the management CIDR
    options: list[ExportOption] = ["rw", "sync", "no_subtree_check", "root_squash"]

    @field_validator("options")
    @classmethod
    def _no_contradiction(cls, value: list[str]) -> list[str]:
        for a, b in (("rw", "ro"), ("sync", "async"), ("root_squash", "no_root_squash")):
            if a in value and b in value:
                raise ValueError(f"options give both '{a}' and '{b}'; keep the one you mean")
        return value


class NfsMount(Strict):
    export: MountPoint
    mount_point: MountPoint
    options: list[MountOption] = ["vers=4.2", "proto=tcp", "hard", "_netdev"]
    clients: Hostlist = "all"  # "all": every node but the server


class Nfs(Strict):
    server: NodeName
    # Skip the NFSv4 grace period after a server (re)start. Lab only: real servers keep it
    # so clients can reclaim locks.
    graceless: bool = False
    exports: list[NfsExport] = Field(min_length=1)
    mounts: list[NfsMount] = []


class LNetNetwork(Strict):
    net: Annotated[str, Field(pattern=r"^(o2ib|tcp|kfi|gni)\d*$")]
    interface: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,15}$")]


class Lustre(Strict):
    fsname: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,8}$")]
    # One entry per MGS node, in failover order; each lists that node's NIDs.
    mgs: list[list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+@(o2ib|tcp|kfi|gni)\d*$")]]] = (
        Field(min_length=1)
    )
    networks: list[LNetNetwork] = Field(min_length=1)
    mount_point: MountPoint
    options: list[MountOption] = ["defaults", "_netdev", "flock", "noatime"]
    clients: Hostlist = "all"
    package: PackageSource | None = None


class Storage(Strict):
    nfs: Nfs | None = None
    lustre: Lustre | None = None


# ---------------------------------------------------------------- the whole spec


class Cluster(Strict):
    cluster: ClusterMeta
    network: Network
    nodes: list[NodeGroup] = Field(min_length=1)
    fabric: Fabric | None = None
    partitions: Partitions
    storage: Storage = Storage()

    @model_validator(mode="after")
    def _bounded(self) -> Cluster:
        """Sizes known before any hostlist is expanded: nodes, and names in all hostlists."""
        total = sum(g.count or 0 if g.names is None else hostlist_size(g.names) for g in self.nodes)
        if total > MAX_HOSTS:
            raise ValueError(
                f"the node groups name {total} nodes in all, more than the limit of {MAX_HOSTS}; "
                "split the cluster into several specs"
            )
        named = sum(hostlist_size(h) for h in self._hostlists())
        if named > MAX_NAMED:
            raise ValueError(
                f"the hostlists of this spec name {named} hosts in all, more than the limit of "
                f"{MAX_NAMED} (each node is named in a few places: its group, a partition, an SU)"
            )
        return self

    def _hostlists(self) -> list[str]:
        out = [g.names for g in self.nodes if g.names]
        s, k, f = self.partitions.slurm, self.partitions.kubernetes, self.fabric
        if s is not None:
            out += [s.controllers, s.login or "x", *(p.nodes for p in s.partitions)]
        if k is not None:
            out += [k.control_plane, k.workers]
        if f is not None:
            ro = f.rail_optimized
            if ro is not None:
                out += [ro.nodes or "x", *(su.nodes for su in ro.scalable_units or ())]
            nvlink = (ro or f.explicit).nvlink  # type: ignore[union-attr]
            if nvlink is not None:
                out += [d.nodes for d in nvlink.domains or ()]
        if self.storage.nfs is not None:
            out += [m.clients for m in self.storage.nfs.mounts]
        if self.storage.lustre is not None:
            out.append(self.storage.lustre.clients)
        return out


# ---------------------------------------------------------------- loading


def parse(text: str, source: str = "<spec>") -> tuple[Cluster, dict[str, int]]:
    """Parse a spec and check each field on its own; raise :class:`SpecError` naming every
    problem, with its line. The rules across fields are the compiler's (railyard.load)."""
    data, lines, raw = _parse_yaml(text, source)
    try:
        return Cluster.model_validate(data), lines
    except ValidationError as exc:
        raise SpecError(source, [_problem(err, lines, raw) for err in exc.errors()]) from None


def _parse_yaml(text: str, source: str) -> tuple[Any, dict[str, int], dict[str, str]]:
    """Parsed once, within the limits of :mod:`railyard.specload`."""
    from railyard.specload import parse

    parsed = parse(text, source)
    if not isinstance(parsed.data, dict):
        raise SpecError(
            source, [Problem("<root>", "the spec must be a mapping with 'cluster', 'nodes', ...", 1)]
        )
    return parsed.data, parsed.lines, parsed.raw


def yaml_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def _line_for(path: str, lines: dict[str, int]) -> int | None:
    """The line of ``path``, else of its nearest parent that is in the file."""
    if path == "<root>":
        return lines.get("")
    while path:
        if path in lines:
            return lines[path]
        parent = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path)
        if parent == path:  # a top-level key the file does not have
            break
        path = parent
    return None


def with_line(problem: Problem, lines: dict[str, int]) -> Problem:
    return Problem(problem.path, problem.message, _line_for(problem.path, lines))


# What the remaining Field(pattern=...) types mean, in words, for their messages.
_PATTERN_WORDS = {
    r"^[a-z][a-z0-9_]{0,39}$": "a lower-case letter, then up to 39 lower-case letters, digits or '_' (e.g. 'lab')",
    r"^1\.\d{2}$": 'a Kubernetes minor version, in quotes (e.g. "1.35")',
    r"^\d+\.\d+\.\d+$": 'a version x.y.z, in quotes (e.g. "0.17.0")',
    r"^(o2ib|tcp|kfi|gni)\d*$": "an LNet network such as 'tcp0' or 'o2ib0'",
    r"^[A-Za-z0-9_.:-]{1,15}$": "a network interface name of up to 15 characters (e.g. 'ib0')",
    r"^[A-Za-z0-9_]{1,8}$": "a Lustre fsname: up to 8 letters, digits or '_'",
    r"^[A-Za-z0-9._-]+@(o2ib|tcp|kfi|gni)\d*$": "a Lustre NID, address@network (e.g. '10.0.0.1@o2ib0')",
}


def _read_as(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "empty (null)"
    return f"a {type(value).__name__}"


def _given(value: Any, raw: str | None) -> str:
    """The value as the user typed it, where the file shows it; else a short description."""
    if raw is not None:
        return raw
    if isinstance(value, dict):
        keys = ", ".join(str(k) for k in list(value)[:4])
        return f"a mapping ({keys}{', ...' if len(value) > 4 else ''})" if value else "an empty mapping"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _problem(err: Any, lines: dict[str, int], raw: dict[str, str] | None = None) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # pydantic adds the member of a union or an annotated type it tried; not a YAML path
    loc = tuple(p for p in loc if not (isinstance(p, str) and (p.startswith(("constrained-", "function-"))
                                                               or p in ("str", "int", "list[str]"))))
    path = yaml_path(loc)
    kind = err["type"]
    value = err.get("input")
    typed = (raw or {}).get(path)
    quote_it = (
        f"{typed} was read as {_read_as(value)}; write \"{typed}\" (in quotes) to give it as text"
        if typed is not None and not isinstance(value, str)
        else None
    )
    if kind == "extra_forbidden":
        allowed = _fields_at(loc[:-1])
        near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean '{near[0]}'?" if near else f"allowed here: {', '.join(allowed)}"
        message = f"unknown key '{loc[-1]}'; remove it ({hint})"
    elif kind == "missing":
        message = f"required key '{loc[-1]}' is missing; add it"
    elif kind == "literal_error":
        if quote_it:
            message = f"{quote_it}; one of {err['ctx']['expected']}"
        else:
            message = f"{value!r} is not allowed; use one of {err['ctx']['expected']}"
    elif kind == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        expected = _PATTERN_WORDS.get(pattern)
        message = f"{value!r} does not match the form {pattern}" + (f": write {expected}" if expected else "")
    elif kind == "string_type" and quote_it:
        message = quote_it
    elif kind == "value_error":
        message = str(err["ctx"]["error"])
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"expected a mapping (key: value), got {_given(value, typed)}"
    elif kind == "list_type":
        message = f"expected a list ([a, b] or '- item' lines), got {_given(value, typed)}"
    else:
        message = f"{err['msg']}; got {_given(value, typed)}"
    return Problem(path, message, _line_for(path, lines))


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The field names a model accepts at ``loc``, for 'did you mean' hints."""
    model: Any = Cluster
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return []
        model = _model_of(field.annotation)
        if model is None:
            return []
    return sorted(model.model_fields) if hasattr(model, "model_fields") else []


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


NvLink.model_rebuild()

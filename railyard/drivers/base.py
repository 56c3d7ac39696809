"""What every node driver speaks: a node spec in, a :class:`NodeState` out.

Specs are plain frozen data so they travel through Pulumi as resource properties
(``to_props``/``node_from_props``) and drivers stay testable without Pulumi.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

Log = Callable[[str], None]
Power = Literal["on", "off", "unknown"]


def quiet(_msg: str) -> None:
    """A :data:`Log` that drops messages."""


class DriverError(RuntimeError):
    """A driver could not do what was asked; the message says what and what to do."""


@dataclass(frozen=True, slots=True)
class NodeState:
    exists: bool
    power: Power = "unknown"
    reachable: bool = False
    detail: str = ""
    # What identifies this incarnation of the node: a container ID, a BMC system UUID,
    # /etc/machine-id. A new value means a new (unconfigured) node.
    instance: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    def to_props(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Attachment:
    """One network interface of a lab container."""

    network: str
    interface: str
    ip: str = ""  # empty: podman picks one
    aliases: tuple[str, ...] = ()  # DNS names on this network


@dataclass(frozen=True, slots=True)
class Volume:
    name: str  # a podman named volume (a host directory, not overlayfs)
    path: str  # mount point inside the container
    # The node whose volume it is, when another node only mounts it (the lab's NFS
    # clients mount their server's export volume); its label names that node. Empty: this
    # node's own. The volume goes with whichever node leaves it unused.
    owner: str = ""


@dataclass(frozen=True, slots=True)
class PodmanNode:
    name: str
    cluster: str
    address: str
    container: str
    image: str
    attachments: tuple[Attachment, ...]
    privileged: bool = False
    devices: tuple[str, ...] = ()  # stand-in character devices (host /dev/null mapped here)
    volumes: tuple[Volume, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    driver: Literal["podman"] = "podman"


@dataclass(frozen=True, slots=True)
class SshNode:
    name: str
    cluster: str
    address: str
    user: str = "root"
    port: int = 22
    driver: Literal["ssh"] = "ssh"


@dataclass(frozen=True, slots=True)
class Bmc:
    address: str  # base URL, e.g. https://gpu001-bmc.example.com
    username: str
    password: str = field(repr=False, default="")
    system_id: str = ""  # empty: the BMC's only system
    verify_tls: bool = True


@dataclass(frozen=True, slots=True)
class RedfishNode:
    name: str
    cluster: str
    address: str
    bmc: Bmc
    boot: Literal["Pxe", "Hdd", "None"] = "Pxe"  # one-time boot device used at power-on
    driver: Literal["redfish"] = "redfish"


NodeSpec = PodmanNode | SshNode | RedfishNode


def to_props(node: NodeSpec) -> dict[str, Any]:
    return _lists(asdict(node))


def _lists(value: Any) -> Any:
    """Tuples become lists: what a property bag gives back after a round trip."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def node_from_props(props: dict[str, Any]) -> NodeSpec:
    kind = props.get("driver")
    common = {k: props[k] for k in ("name", "cluster", "address")}
    if kind == "podman":
        return PodmanNode(
            **common,
            container=props["container"],
            image=props["image"],
            attachments=tuple(
                Attachment(a["network"], a["interface"], a.get("ip", ""), tuple(a.get("aliases", ())))
                for a in props.get("attachments", ())
            ),
            privileged=bool(props.get("privileged", False)),
            devices=tuple(props.get("devices", ())),
            volumes=tuple(Volume(v["name"], v["path"], v.get("owner", "")) for v in props.get("volumes", ())),
            labels=tuple((k, v) for k, v in props.get("labels", ())),
        )
    if kind == "ssh":
        return SshNode(**common, user=props.get("user", "root"), port=int(props.get("port", 22)))
    if kind == "redfish":
        b = props["bmc"]
        bmc = Bmc(
            address=b["address"],
            username=b["username"],
            password=b.get("password", ""),
            system_id=b.get("system_id", ""),
            verify_tls=bool(b.get("verify_tls", True)),
        )
        return RedfishNode(**common, bmc=bmc, boot=props.get("boot", "Pxe"))
    raise DriverError(f"unknown node driver {kind!r}; use podman, ssh or redfish")


class Driver(Protocol):
    """One way to bring a node to life. Every method is idempotent."""

    def observe(self, node: Any) -> NodeState:
        """The node's real state, without changing it."""
        ...

    def ensure_up(self, node: Any, log: Log = quiet) -> NodeState:
        """Make the node exist, powered on and reachable; adopt what is already there."""
        ...

    def ensure_absent(self, node: Any, log: Log = quiet) -> None:
        """Make the node gone (lab) or powered off (metal)."""
        ...

"""Node drivers: small adapters that make a node exist and report what is really there.

``podman`` (lab containers), ``ssh`` (pre-provisioned hosts) and ``redfish`` (BMCs) share
one interface, :class:`~railyard.drivers.base.Driver`; :func:`driver_for` picks one.
"""

from __future__ import annotations

from railyard.drivers.base import (
    Attachment,
    Bmc,
    Driver,
    DriverError,
    NodeSpec,
    NodeState,
    PodmanNode,
    RedfishNode,
    SshNode,
    Volume,
    node_from_props,
    to_props,
)


def driver_for(node: NodeSpec) -> Driver:
    if isinstance(node, PodmanNode):
        from railyard.drivers.podman import PodmanDriver

        return PodmanDriver()
    if isinstance(node, SshNode):
        from railyard.drivers.ssh import SshDriver

        return SshDriver()
    from railyard.drivers.redfish import RedfishDriver

    return RedfishDriver()


__all__ = [
    "Attachment",
    "Bmc",
    "Driver",
    "DriverError",
    "NodeSpec",
    "NodeState",
    "PodmanNode",
    "RedfishNode",
    "SshNode",
    "Volume",
    "driver_for",
    "node_from_props",
    "to_props",
]

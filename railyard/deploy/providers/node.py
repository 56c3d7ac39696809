"""``railyard:metal:Node``: one machine, brought up by its driver; ``read`` is what is really there.

* ``read`` (``pulumi refresh``): a lab container that is gone reports an empty id, so the
  refresh shows it deleted and the next ``up`` creates it again; a node that is off or
  unreachable keeps its id with ``power``/``reachable`` saying so, and the next ``up``
  updates it (power on / start).
* a new ``instance`` (a new container, a reinstalled host) is what makes the Playbooks
  that depend on the node run again, on that node only.
* podman settings that shape the container force a replacement (delete first: the
  container name is fixed); for ssh and redfish nothing is ever replaced, since a
  replacement of a real server would mean powering it off.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, CreateResult, ReadResult, Resource, UpdateResult

from railyard.deploy.providers.base import LOG_URN, Provider, ResourceLog, log_urn
from railyard.drivers import DriverError, driver_for, node_from_props

STATE_KEYS = ("exists", "power", "reachable", "detail", "instance", "facts")
# Inputs that can change without touching the machine.
NOT_REPLACING = frozenset({"bmc", "labels"})


def _state(node_state: Any) -> dict[str, Any]:
    return {k: v for k, v in node_state.to_props().items() if k in STATE_KEYS}


class NodeProvider(Provider):
    state_keys: ClassVar[frozenset[str]] = frozenset(STATE_KEYS)

    def problems(self, news: dict[str, Any]) -> list[CheckFailure]:
        try:
            node_from_props(self.inputs_of(news))
        except (DriverError, KeyError, TypeError) as exc:
            return [CheckFailure("driver", f"not a valid node: {exc}")]
        return []

    def replaces(self, changed: list[str], olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
        if news.get("driver") != "podman" or olds.get("driver") != "podman":
            return []
        return [k for k in changed if k not in NOT_REPLACING]

    def drifted(self, olds: dict[str, Any], _news: dict[str, Any]) -> bool:
        return olds.get("exists") is False or olds.get("power") != "on"

    def _up(self, props: dict[str, Any]) -> dict[str, Any]:
        node = node_from_props(self.inputs_of(props))
        log = ResourceLog(props.get(LOG_URN))
        state = driver_for(node).ensure_up(node, log.status)
        if not state.reachable:
            raise DriverError(f"{node.name} is up but not reachable: {state.detail}")
        return self.outputs(props, _state(state))

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = self._up(props)
        return CreateResult(props["name"], outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._up(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = node_from_props(self.inputs_of(props))
        driver_for(node).ensure_absent(node, ResourceLog(props.get(LOG_URN)).status)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        node = node_from_props(self.inputs_of(props))
        state = driver_for(node).observe(node)
        if not state.exists:
            ResourceLog(props.get(LOG_URN)).warn(f"{node.name}: gone ({state.detail})")
            return ReadResult("", {})
        return ReadResult(id_, {**props, **_state(state)})


class Node(Resource, module="railyard/metal", name="Node"):
    """A machine of the cluster. ``instance`` changes when the machine is a new one."""

    instance: pulumi.Output[str]
    power: pulumi.Output[str]
    reachable: pulumi.Output[bool]
    address: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        secret = ["bmc"] if props.get("driver") == "redfish" else []
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=secret))
        props = {**props, LOG_URN: log_urn(type(self), name, opts), **{k: None for k in STATE_KEYS}}
        super().__init__(NodeProvider(), name, props, opts)

"""``railyard:lab:Network``: a podman network of the lab (management, or one rail leaf)."""

from __future__ import annotations

from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CreateResult, ReadResult, Resource, UpdateResult

from railyard.deploy.providers.base import LOG_URN, Provider, ResourceLog, log_urn
from railyard.drivers import podman

STATE_KEYS = ("actual_subnet",)


def _spec(props: dict[str, Any]) -> podman.NetworkSpec:
    return podman.NetworkSpec(
        name=props["name"],
        cluster=props["cluster"],
        subnet=props.get("subnet") or "",
        gateway=props.get("gateway") or "",
        internal=bool(props.get("internal")),
        dns=bool(props.get("dns", True)),
    )


class NetworkProvider(Provider):
    state_keys: ClassVar[frozenset[str]] = frozenset(STATE_KEYS)

    def replaces(self, changed: list[str], olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
        return changed  # a podman network cannot be changed in place

    def create(self, props: dict[str, Any]) -> CreateResult:
        info = podman.ensure_network(_spec(props), ResourceLog(props.get(LOG_URN)).status)
        return CreateResult(props["name"], self.outputs(props, {"actual_subnet": podman.network_subnet(info)}))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        info = podman.ensure_network(_spec(news))
        return UpdateResult(self.outputs(news, {"actual_subnet": podman.network_subnet(info)}))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        podman.remove_network(props["name"], ResourceLog(props.get(LOG_URN)).status)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        info = podman.observe_network(props["name"])
        if info is None:
            return ReadResult("", {})
        return ReadResult(id_, {**props, "actual_subnet": podman.network_subnet(info)})


class Network(Resource, module="railyard/lab", name="Network"):
    name: pulumi.Output[str]
    actual_subnet: pulumi.Output[str]

    def __init__(self, name: str, spec: podman.NetworkSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        props = {
            "name": spec.name,
            "cluster": spec.cluster,
            "subnet": spec.subnet,
            "gateway": spec.gateway,
            "internal": spec.internal,
            "dns": spec.dns,
            LOG_URN: log_urn(type(self), name, opts),
            "actual_subnet": None,
        }
        super().__init__(NetworkProvider(), name, props, opts)

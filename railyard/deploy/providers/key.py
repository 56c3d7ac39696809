"""``railyard:secrets:Key``: random bytes made once, kept only as a Pulumi secret.

``create`` is the only place the bytes are made; ``update`` and ``read`` keep them, so a
munge key survives every ``up`` and ``refresh`` and changes only when the resource is
replaced (a new ``length``) or destroyed. The value is an additional secret output:
encrypted in the state, ``[secret]`` in every display. Nothing here logs it.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, CreateResult, ReadResult, Resource, UpdateResult

from railyard.deploy.providers.base import Provider

STATE_KEYS = ("value",)
# How the bytes are written: base64 (a munge key, decoded on the node) or hex (a password
# that slurmdbd.conf and MariaDB take as it is).
ENCODINGS = {"base64": lambda b: base64.b64encode(b).decode(), "hex": bytes.hex}


class KeyProvider(Provider):
    state_keys: ClassVar[frozenset[str]] = frozenset(STATE_KEYS)

    def problems(self, news: dict[str, Any]) -> list[CheckFailure]:
        length = news.get("length")  # numbers arrive as floats (protobuf Struct): 1024.0
        if not isinstance(length, (int, float)) or length != int(length) or not 32 <= length <= 65536:
            return [CheckFailure("length", f"length must be 32..65536 bytes, got {length!r}")]
        if news.get("encoding", "base64") not in ENCODINGS:
            return [CheckFailure("encoding", f"encoding must be one of {', '.join(ENCODINGS)}")]
        return []

    def replaces(self, changed: list[str], olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
        return changed

    def create(self, props: dict[str, Any]) -> CreateResult:
        value = ENCODINGS[props.get("encoding") or "base64"](secrets.token_bytes(int(props["length"])))
        return CreateResult(props["purpose"], self.outputs(props, {"value": value}))

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self.outputs(news, {"value": olds["value"]}))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)  # nothing outside Pulumi to observe


class Key(Resource, module="railyard/secrets", name="Key"):
    """``value`` is the key, base64-encoded (or hex); always a secret Output."""

    value: pulumi.Output[str]

    def __init__(self, name: str, purpose: str, length: int = 1024, encoding: str = "base64",
                 opts: pulumi.ResourceOptions | None = None) -> None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["value"]))
        props = {"purpose": purpose, "length": length, "value": None}
        if encoding != "base64":  # absent for base64: the munge keys made before stay as they are
            props["encoding"] = encoding
        super().__init__(KeyProvider(), name, props, opts)

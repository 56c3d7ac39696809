"""What every railyard dynamic provider shares: echoed inputs, a generic diff, logging.

Facts this rests on (pulumi/pulumi source, checked against SDK 3.272):

* ``olds`` in diff/update/delete are the old *outputs*, so outputs echo the inputs; the
  observed part of the state (``state_keys``) is kept apart and never diffed as an input.
* Providers are pickled by reference when their class lives in an importable module:
  keep provider instances stateless (no attributes).
* Dynamic resource type tokens are always ``pulumi-python:dynamic/<module>:<name>``; ours
  read ``pulumi-python:dynamic/railyard/metal:Node`` for ``railyard:metal:Node``.

Logging: ``pulumi.log`` does not reach the engine from a provider process (it has no
engine connection and falls back to printing ``info: ...`` on stderr, which the engine
shows as a message of the *stack*, not of the resource). The engine does pass its own
address as the provider's first argument, so :class:`ResourceLog` calls the engine's
``Log`` RPC there with the resource's URN: lines appear under the resource, and
``status`` lines (ephemeral) update the resource's progress row without piling up.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from typing import Any, ClassVar

from pulumi.dynamic import CheckFailure, CheckResult, DiffResult, ResourceProvider

PROVIDER_KEY = "__provider"
LOG_URN = "log_urn"  # an input that only tells the provider where to log; never diffed

_ADDRESS = re.compile(r"^(127\.0\.0\.1|localhost|\[::1\]):\d+$")
_lock = threading.Lock()
_engine: Any = None
_engine_tried = False


def _engine_stub() -> Any:
    """The engine's Log service, at the address the engine gave this process (or None)."""
    global _engine, _engine_tried
    with _lock:
        if not _engine_tried:
            _engine_tried = True
            addr = next((a for a in sys.argv[1:] if _ADDRESS.match(a)), None)
            if addr is not None:
                import grpc
                from pulumi.runtime.proto import engine_pb2_grpc

                _engine = engine_pb2_grpc.EngineStub(grpc.insecure_channel(addr))
        return _engine


class ResourceLog:
    """Lines that reach ``pulumi up`` output under one resource. Never give it a secret."""

    def __init__(self, urn: str | None) -> None:
        self.urn = urn or ""

    def _send(self, severity: str, msg: str, ephemeral: bool) -> None:
        engine = _engine_stub()
        if engine is not None:
            from pulumi.runtime.proto import engine_pb2

            try:
                engine.Log(engine_pb2.LogRequest(
                    severity=getattr(engine_pb2, severity), message=msg, urn=self.urn, ephemeral=ephemeral
                ))
                return
            except Exception:  # noqa: BLE001 - logging must never fail an operation: use stderr
                engine = None
        if not ephemeral:
            print(f"{severity.lower()}: {msg}", file=sys.stderr, flush=True)

    def __call__(self, msg: str) -> None:
        self._send("INFO", msg, False)

    def warn(self, msg: str) -> None:
        self._send("WARNING", msg, False)

    def status(self, msg: str) -> None:
        """A progress line that replaces the previous one (not kept in the summary)."""
        self._send("INFO", msg, True)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class Provider(ResourceProvider):
    """Outputs = comparable(inputs) + observed state. Subclasses implement the verbs."""

    # Outputs that are observed, not asked for: never compared as inputs.
    state_keys: ClassVar[frozenset[str]] = frozenset()
    # Inputs that never cause a change by themselves.
    ignore_keys: ClassVar[frozenset[str]] = frozenset({LOG_URN})

    # ------------------------------------------------------------ hooks for subclasses

    def problems(self, news: dict[str, Any]) -> list[CheckFailure]:
        return []

    def comparable(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Inputs as they are kept in outputs (e.g. secrets replaced by their hash)."""
        return inputs

    def replaces(self, changed: list[str], olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
        return []

    def drifted(self, olds: dict[str, Any], news: dict[str, Any]) -> bool:
        """True when the real state needs an update to match the inputs: observed after a
        refresh (in ``olds``) or reported by a drift check (in ``news``)."""
        return False

    # ------------------------------------------------------------ generic parts

    def inputs_of(self, props: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in props.items() if k != PROVIDER_KEY and k not in self.state_keys}

    def outputs(self, news: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {**self.comparable(self.inputs_of(news)), **state}

    def changed_keys(self, olds: dict[str, Any], news: dict[str, Any]) -> list[str]:
        old = {k: v for k, v in self.inputs_of(olds).items() if k not in self.ignore_keys}
        new = {k: v for k, v in self.comparable(self.inputs_of(news)).items() if k not in self.ignore_keys}
        return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        return CheckResult(news, self.problems(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = self.changed_keys(olds, news)
        replaces = self.replaces(changed, olds, news) if changed else []
        return DiffResult(
            changes=bool(changed) or self.drifted(olds, news),
            replaces=replaces,
            stables=[],
            delete_before_replace=bool(replaces),
        )


def log_urn(resource_cls: type, name: str, opts: Any) -> str:
    """The URN a dynamic resource will get, as a plain string, so its provider can log under it.

    Not ``pulumi.create_urn(parent=...)``: that Output depends on the parent component,
    and a dependency on a component is one on all its children, the resource itself
    included (Pulumi reports "a circular dependency"). Parents here are top-level
    components, so the type chain is ``<parent type>$<type>``.
    """
    import pulumi

    type_ = f"pulumi-python:{resource_cls._resource_type_name}"
    parent = opts.parent if opts is not None else None
    if parent is not None and parent.pulumi_resource_type != "pulumi:pulumi:Stack":
        type_ = f"{parent.pulumi_resource_type}${type_}"
    return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{type_}::{name}"

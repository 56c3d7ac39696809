"""Secret references from the spec (``env:VAR``, ``file:/path``, ``pulumi:key``) to values.

The spec never holds a secret, only where to find it. :func:`resolve` is the plain lookup
(env and file); :func:`resolve_output` is what the Pulumi program uses: every kind becomes
a *secret* Output, so the value is encrypted in the state and masked in the output.
Error messages name the reference, never the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pulumi

Kind = Literal["env", "file", "pulumi"]
DEFAULT_NAMESPACE = "railyard"


class SecretRefError(ValueError):
    """A secret reference cannot be resolved; the message says which and how to fix it."""


def parse_ref(ref: str) -> tuple[Kind, str]:
    kind, sep, rest = ref.partition(":")
    if not sep or not rest or kind not in ("env", "file", "pulumi"):
        raise SecretRefError(f"{ref!r} is not a secret reference; write env:VAR, file:/path or pulumi:configKey")
    return kind, rest  # type: ignore[return-value]


def config_key(rest: str) -> tuple[str, str]:
    """``bmcPassword`` -> (railyard, bmcPassword); ``ns:key`` -> (ns, key)."""
    ns, sep, key = rest.rpartition(":")
    return (ns if sep else DEFAULT_NAMESPACE), key


def resolve(ref: str, env: Mapping[str, str] | None = None) -> str:
    """The value of an ``env:`` or ``file:`` reference (``pulumi:`` needs the program)."""
    kind, rest = parse_ref(ref)
    env = os.environ if env is None else env
    if kind == "env":
        if rest not in env:
            raise SecretRefError(f"secret {ref}: environment variable {rest} is not set; export it before running")
        return env[rest]
    if kind == "file":
        path = Path(rest)
        try:
            mode = path.stat().st_mode
            value = path.read_text().rstrip("\n")
        except OSError as exc:
            raise SecretRefError(f"secret {ref}: cannot read {path}: {exc.strerror}") from None
        if mode & 0o077:
            raise SecretRefError(f"secret {ref}: {path} is readable by others (mode {mode & 0o777:o}); chmod 600 it")
        return value
    raise SecretRefError(f"secret {ref}: pulumi config references are resolved by the Pulumi program")


def resolve_output(ref: str) -> pulumi.Output[str]:
    """A secret Output for any reference kind; ``pulumi:`` reads the stack's secret config."""
    import pulumi

    kind, rest = parse_ref(ref)
    if kind == "pulumi":
        ns, key = config_key(rest)
        value = pulumi.Config(ns).get_secret(key)
        if value is None:
            raise SecretRefError(
                f"secret {ref}: stack config {ns}:{key} is not set; run "
                f"`pulumi config set --secret {ns}:{key}` (value on stdin)"
            )
        return value
    return pulumi.Output.secret(resolve(ref))

"""What a role says about itself, read where the role states it: its defaults
(``defaults/main.yml``) and railyard's facts about it (``meta/railyard.yml``, which Ansible
does not read). Deploy and drift take role facts from here instead of restating them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml


@cache
def _load(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


def defaults(root: Path, role: str) -> dict[str, Any]:
    return _load(root / "roles" / role / "defaults" / "main.yml")


def role_vars(root: Path, role: str) -> dict[str, Any]:
    return _load(root / "roles" / role / "vars" / "main.yml")


def facts(root: Path, role: str) -> dict[str, Any]:
    return _load(root / "roles" / role / "meta" / "railyard.yml")


# A role whose name starts with this is a helper: task files other roles import
# (``roles/_shared``, as prometheus-community's ``_common``), with no ``tasks/main.yml``,
# never a step of its own, never run alone (so no molecule scenario of its own).
HELPER_PREFIX = "_"


def is_helper(role: str) -> bool:
    return role.startswith(HELPER_PREFIX)


def uses(root: Path, role: str) -> tuple[str, ...]:
    """The roles whose task files this role runs (``import_role``/``include_role``), from
    ``meta/railyard.yml``'s ``uses``, and theirs in turn, each once, in order. What they
    run on the role's hosts is the role's behaviour too: their files are part of its digest.
    A ValueError names a malformed list. (That each exists, and that a role declares every
    role it imports, is tests/test_role_specs.py's to check: Ansible fails on a missing one.)"""
    out: list[str] = []
    todo = [role]
    while todo:
        current = todo.pop(0)
        where = f"roles/{current}/meta/railyard.yml"
        names = facts(root, current).get("uses") or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"{where}: uses must be a list of role names, not {names!r}")
        for name in names:
            if name != role and name not in out:
                out.append(name)
                todo.append(name)
    return tuple(out)


def default(root: Path, role: str, name: str) -> Any:
    """One default of a role; a KeyError names the role and the variable."""
    values = defaults(root, role)
    if name not in values:
        raise KeyError(f"roles/{role}/defaults/main.yml has no {name}")
    return values[name]


# ``{{ other | default('value') }}``: the one template a role variable may hold for railyard
# to read it (a default that follows one of railyard's inventory variables).
_FOLLOWS = re.compile(r"^\{\{\s*(\w+)\s*\|\s*default\((?:'([^'{}]*)'|(true|false))\)\s*\}\}$")
_MISSING = object()


def lookup(root: Path, role: str, name: str, extravars: Mapping[str, Any], inventory: Mapping[str, Any]) -> Any:
    """A role variable as Ansible would see it, in Ansible's order: railyard's extravars,
    the role's ``vars/``, the inventory (host, then cluster variables), the role's
    ``defaults/``. ``a.b`` is key ``b`` of ``a``. A KeyError when it is not set; a
    ValueError when its value is a template other than ``{{ x | default('v') }}`` (or
    ``default(true)``, ``default(false)``)."""
    head, *keys = name.split(".")
    value: Any = _MISSING
    for layer in (extravars, role_vars(root, role), inventory, defaults(root, role)):
        if head in layer:
            value = layer[head]
            break
    if value is _MISSING:
        raise KeyError(f"role {role}: {head} is set nowhere railyard can see (extravars, vars/, inventory, defaults/)")
    if isinstance(value, str) and "{{" in value:
        m = _FOLLOWS.match(value.strip())
        if m is None:
            raise ValueError(f"role {role}: {head} is a template railyard cannot read without Ansible: {value!r}")
        try:
            value = lookup(root, role, m[1], extravars, inventory)
        except KeyError:
            value = m[2] if m[3] is None else m[3] == "true"
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise KeyError(f"role {role}: {name} is not set ({head} has no {key})")
        value = value[key]
    return value


WANTS = ("active", "enabled")
UNIT_TYPES = ("service", "mount", "automount", "socket", "timer", "path", "target", "swap", "slice", "scope", "device")


def unit_name(name: str) -> str:
    """What ``systemctl`` calls a unit: a name without a type is a .service."""
    return name if name.rpartition(".")[2] in UNIT_TYPES and "." in name else f"{name}.service"


def units(root: Path, role: str, extravars: Mapping[str, Any], inventory: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(unit, want) for each unit the role keeps on a host whose variables are
    ``extravars`` and ``inventory`` (see :func:`lookup`), from ``meta/railyard.yml``'s
    ``units``. Each entry: ``unit`` (a name or a list) or ``var`` (a role variable holding
    a name, a list of names, or a list of mappings with a ``name``); ``want``: ``active``
    or ``enabled``; ``when`` (optional): variable -> the value it must have."""
    where = f"roles/{role}/meta/railyard.yml"
    entries = facts(root, role).get("units") or []
    if not isinstance(entries, list):
        raise TypeError(f"{where}: units must be a list")
    out: list[tuple[str, str]] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) - {"unit", "var", "want", "when"} or ("unit" in e) == ("var" in e):
            raise ValueError(f"{where}: units[{i}] needs unit or var (one of them), want, and may have when: {e!r}")
        if e.get("want") not in WANTS:
            raise ValueError(f"{where}: units[{i}].want must be one of {', '.join(WANTS)}, not {e.get('want')!r}")
        when = e.get("when") or {}
        if not isinstance(when, dict):
            raise TypeError(f"{where}: units[{i}].when must map variables to values")
        if any(lookup(root, role, var, extravars, inventory) != value for var, value in when.items()):
            continue
        names = e["unit"] if "unit" in e else lookup(root, role, e["var"], extravars, inventory)
        for n in names if isinstance(names, list) else [names]:
            n = n.get("name") if isinstance(n, dict) else n
            if not isinstance(n, str) or not n or "{{" in n:
                raise ValueError(f"{where}: units[{i}] names no unit: {n!r}")
            out.append((unit_name(n), e["want"]))
    return tuple(out)

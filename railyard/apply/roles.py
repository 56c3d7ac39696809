"""What a role says about itself, read where the role states it: its defaults
(``defaults/main.yml``) and railyard's facts about it (``meta/railyard.yml``, which Ansible
does not read). Deploy and drift take role facts from here instead of restating them."""

from __future__ import annotations

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


def facts(root: Path, role: str) -> dict[str, Any]:
    return _load(root / "roles" / role / "meta" / "railyard.yml")


def default(root: Path, role: str, name: str) -> Any:
    """One default of a role; a KeyError names the role and the variable."""
    values = defaults(root, role)
    if name not in values:
        raise KeyError(f"roles/{role}/defaults/main.yml has no {name}")
    return values[name]

"""Specs as YAML data in unit tests: compile one, or see what validate refuses where."""

from __future__ import annotations

import pytest
import yaml

from railyard.errors import SpecError
from railyard.load import loads_plan


def plan(spec: dict, source: str = "spec.yaml"):
    return loads_plan(yaml.safe_dump(spec, sort_keys=False), source)


def refused_at(spec: dict, path: str) -> str:
    """The messages validate gives at YAML *path* (it must give one); nothing else is built."""
    with pytest.raises(SpecError) as info:
        plan(spec)
    found = [p for p in info.value.problems if p.path == path]
    assert found, f"nothing at {path} in:\n{info.value}"
    return " ".join(p.message for p in found)

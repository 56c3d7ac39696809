from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "inventories" / "lab" / "cluster.yaml"
EXAMPLES = sorted((ROOT / "inventories").glob("*/cluster.yaml"))


@pytest.fixture(scope="session")
def lab_dict() -> dict:
    return yaml.safe_load(LAB.read_text())


@pytest.fixture
def lab(lab_dict) -> dict:
    """A fresh, mutable copy of the lab spec as data."""
    return copy.deepcopy(lab_dict)


@pytest.fixture(scope="session")
def lab_plan():
    from railyard.spec import load_plan

    return load_plan(LAB)

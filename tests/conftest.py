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


# Suites written but not yet proven green from a clean clone inside CI's limits. They are
# skipped with the reason printed (never counted as passes) until that proof is made;
# RAILYARD_RUN_WIP=1 runs them. Remove an entry only with a clean-clone `make test` run.
WIP: dict[str, str] = {}  # path -> reason; empty: every suite is proven


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("RAILYARD_RUN_WIP") == "1":
        return
    for item in items:
        rel = str(Path(item.fspath).relative_to(ROOT))
        if rel in WIP:
            item.add_marker(pytest.mark.skip(reason=f"WIP, RAILYARD_RUN_WIP=1 runs it: {WIP[rel]}"))

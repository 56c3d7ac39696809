"""Proof against the real scheduler: Debian 12's slurmctld reads railyard's rendered
slurm.conf/topology.conf/gres.conf and reports exactly the topology of the plan."""

from __future__ import annotations

import sys

import pytest
import yaml

from railyard.hostlist import expand
from railyard.render import render, write
from railyard.spec import loads_plan
from tests.conftest import ROOT
from tests.support.slurmhost import SlurmHost, slurm_missing_reason
from tests.support.topology import expected_topology

MISSING = slurm_missing_reason()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(MISSING is not None, reason=f"no Slurm on this host: {MISSING}")]


def observed_topology(host: SlurmHost) -> dict[str, tuple[int, frozenset[str], frozenset[str]]]:
    return {t["SwitchName"]: (t["Level"], t["Nodes"], t["Switches"]) for t in host.show_topology()}


def _spec_at_2205(path, tmp_path, **changes):
    spec = yaml.safe_load(path.read_text()) if hasattr(path, "read_text") else yaml.safe_load(path)
    spec["cluster"]["versions"]["slurm"] = "22.05"
    for key, value in changes.items():
        spec[key] = value
    return loads_plan(yaml.safe_dump(spec), str(path)[:60])


def _render(plan, tmp_path):
    out = tmp_path / "render"
    write(render(plan), out)
    return out / "slurm"


def test_lab_topology_matches_the_plan_exactly(lab_plan, tmp_path):
    with SlurmHost(_render(lab_plan, tmp_path)) as host:
        assert observed_topology(host) == expected_topology(lab_plan)
        parts = {p["PartitionName"]: p for p in host.show_partitions()}
        assert set(parts) == {"gpu"}
        assert set(expand(parts["gpu"]["Nodes"])) == set(lab_plan.slurm.compute)
        assert parts["gpu"]["Default"] == "YES" and parts["gpu"]["MaxTime"] == "1-00:00:00"
        nodes = {n["NodeName"]: n for n in host.show_nodes()}
        assert set(nodes) == set(lab_plan.slurm.compute)
        assert {n["Gres"] for n in nodes.values()} == {"gpu:standin:2"}
        assert {(n["CPUTot"], n["RealMemory"]) for n in nodes.values()} == {("2", "1000")}


def test_dgx_h100_four_su_tree_at_22_05(tmp_path):
    plan = _spec_at_2205(ROOT / "inventories/dgx-h100/cluster.yaml", tmp_path)
    with SlurmHost(_render(plan, tmp_path)) as host:
        observed = observed_topology(host)
    assert observed == expected_topology(plan)
    assert observed["spine"][0] == 1 and len(observed["spine"][1]) == 96


def test_three_tier_fabric_at_22_05(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compile_bench import spec_text

    plan = _spec_at_2205(spec_text(256), tmp_path)
    with SlurmHost(_render(plan, tmp_path)) as host:
        observed = observed_topology(host)
    assert observed == expected_topology(plan)
    assert observed["core"][0] == 2 and observed["pod1"][2] == frozenset({"su1", "su2", "su3", "su4"})


def test_a_hand_broken_topology_is_refused(lab_plan, tmp_path):
    """The check above can fail: the same harness refuses a topology Slurm rejects."""
    conf = _render(lab_plan, tmp_path)
    topo = conf / "topology.conf"
    topo.write_text(topo.read_text().replace("SwitchName=spine Switches=su[1-2]", "SwitchName=spine Switches=su[1-3]"))
    host = SlurmHost(conf)
    message = host.expect_fatal()
    assert "invalid child" in message

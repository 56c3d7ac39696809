"""Proof against the real scheduler: Debian 12's slurmctld reads railyard's rendered
slurm.conf/topology.conf/gres.conf and reports exactly the topology the spec describes.

Expectations are literals or derived from the spec's YAML (tests/support/topology.py),
never read from the compiled plan: a compiler bug must not become its own expectation."""

from __future__ import annotations

import copy
import sys

import pytest
import yaml

from railyard.errors import SpecError
from railyard.hostlist import expand
from railyard.load import loads_plan
from railyard.render import render, write
from tests.conftest import ROOT
from tests.support.slurmhost import SlurmHost, slurm_missing_reason
from tests.support.topology import expected_topology

MISSING = slurm_missing_reason()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(MISSING is not None, reason=f"no Slurm on this host: {MISSING}")]


def observed_topology(host: SlurmHost) -> dict[str, tuple[int, frozenset[str], frozenset[str]]]:
    return {t["SwitchName"]: (t["Level"], t["Nodes"], t["Switches"]) for t in host.show_topology()}


def _spec_at_2205(path) -> dict:
    spec = yaml.safe_load(path.read_text()) if hasattr(path, "read_text") else yaml.safe_load(path)
    spec["cluster"]["versions"]["slurm"] = "22.05"
    return spec


# The lab's fabric as its cluster.yaml draws it: two SUs under one spine group; kw1/kw2
# are Kubernetes workers, so Slurm does not see them.
LAB_TOPOLOGY = {
    "su1": (0, frozenset({"gpu001", "gpu002"}), frozenset()),
    "su2": (0, frozenset({"gpu003", "gpu004"}), frozenset()),
    "spine": (1, frozenset({"gpu001", "gpu002", "gpu003", "gpu004"}), frozenset({"su1", "su2"})),
}


def test_lab_derivation_is_the_literal(lab_dict):
    """The independent derivation agrees with the lab drawn by hand."""
    assert expected_topology(lab_dict) == LAB_TOPOLOGY


def _render(plan, tmp_path):
    out = tmp_path / "render"
    write(render(plan), out)
    return out / "slurm"


def test_lab_topology_is_the_lab_drawn_by_hand(lab_plan, tmp_path):
    gpus = {"gpu001", "gpu002", "gpu003", "gpu004"}
    with SlurmHost(_render(lab_plan, tmp_path)) as host:
        assert observed_topology(host) == LAB_TOPOLOGY
        parts = {p["PartitionName"]: p for p in host.show_partitions()}
        assert set(parts) == {"gpu"}
        assert set(expand(parts["gpu"]["Nodes"])) == gpus
        assert parts["gpu"]["Default"] == "YES" and parts["gpu"]["MaxTime"] == "1-00:00:00"
        nodes = {n["NodeName"]: n for n in host.show_nodes()}
        assert set(nodes) == gpus
        assert {n["Gres"] for n in nodes.values()} == {"gpu:standin:2"}
        assert {(n["CPUTot"], n["RealMemory"]) for n in nodes.values()} == {("2", "1000")}


def test_dgx_h100_four_su_tree_at_22_05(tmp_path):
    spec = _spec_at_2205(ROOT / "inventories/dgx-h100/cluster.yaml")
    with SlurmHost(_render(loads_plan(yaml.safe_dump(spec)), tmp_path)) as host:
        observed = observed_topology(host)
    assert observed == expected_topology(spec)
    # 96 of the 128 nodes (su1-su3) are Slurm's; su4 is Kubernetes' and not in the tree.
    assert set(observed) == {"su1", "su2", "su3", "spine"}
    assert observed["spine"][0] == 1 and len(observed["spine"][1]) == 96


def test_three_tier_fabric_at_22_05(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compile_bench import spec_text

    spec = _spec_at_2205(spec_text(256))
    with SlurmHost(_render(loads_plan(yaml.safe_dump(spec)), tmp_path)) as host:
        observed = observed_topology(host)
    assert observed == expected_topology(spec)
    assert observed["core"][0] == 2 and observed["pod1"][2] == frozenset({"su1", "su2", "su3", "su4"})


def test_a_hand_broken_topology_is_refused(lab_plan, tmp_path):
    """The check above can fail: the same harness refuses a topology Slurm rejects."""
    conf = _render(lab_plan, tmp_path)
    topo = conf / "topology.conf"
    topo.write_text(topo.read_text().replace("SwitchName=spine Switches=su[1-2]", "SwitchName=spine Switches=su[1-3]"))
    host = SlurmHost(conf)
    message = host.expect_fatal()
    assert "invalid child" in message


def test_an_su_named_like_the_spine_group_is_refused_before_slurmctld_sees_it(lab_dict, lab_plan, tmp_path):
    """What railyard wrote before it refused such names: slurmctld stops on it. The compiler
    now refuses the spec at the SU's YAML path instead."""
    conf = _render(lab_plan, tmp_path)
    (conf / "topology.conf").write_text(
        "SwitchName=su1 Nodes=gpu[001-002]\nSwitchName=spine Nodes=gpu[003-004]\n"
        "SwitchName=spine Switches=spine,su1\n"
    )
    assert "Switch (spine) has already been defined" in SlurmHost(conf).expect_fatal()
    spec = copy.deepcopy(lab_dict)
    spec["fabric"]["rail_optimized"]["scalable_units"][1]["name"] = "spine"
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(spec))
    assert [p.path for p in info.value.problems] == ["fabric.rail_optimized.scalable_units[1].name"]

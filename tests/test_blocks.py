"""Slurm topology/block from NVLink domains (issue 19, item 7): blocks listed SU by SU,
BlockSizes whose aggregates never span two SUs, partial blocks refused where Slurm stops
on them (24.05, 24.11) and a note where it keeps them (25.05+).

How Slurm aggregates (src/plugins/topology/block/block_record.c, block_record_validate):
a BlockSizes level of 2^j base blocks joins blocks [k*2^j, (k+1)*2^j) in the order
topology.conf lists them. Expected values here are literals worked out from the specs.
"""

from __future__ import annotations

import pytest
import yaml

from railyard.errors import SpecError
from railyard.load import loads_plan
from railyard.render import render
from tests.conftest import ROOT

GB200 = ROOT / "inventories" / "gb200-nvl72" / "cluster.yaml"


@pytest.fixture
def gb200() -> dict:
    return yaml.safe_load(GB200.read_text())


def _plan(spec: dict):
    return loads_plan(yaml.safe_dump(spec, sort_keys=False), "t.yaml")


def _refused(spec: dict) -> SpecError:
    with pytest.raises(SpecError) as info:
        _plan(spec)
    return info.value


def _blocks(spec: dict) -> tuple[list[str], list[int]]:
    topo = yaml.safe_load(render(_plan(spec))["slurm/topology.yaml"])
    block = next(t for t in topo if t["topology"] == "nvlink")["block"]
    return [b["block"] for b in block["blocks"]], block["block_sizes"]


def test_four_domains_per_su_keep_three_levels(gb200):
    """The example: 3 Slurm SUs of 4 racks of 18 trays: 18, 36, 72 stay inside an SU."""
    names, sizes = _blocks(gb200)
    assert sizes == [18, 36, 72]
    assert names == [f"nvl{i}" for i in range(1, 13)]


def _su_of_54(spec: dict) -> None:
    """SUs of 3 racks: gb[001-288] in 6 SUs (the last of 18), 6 uplinks per leaf."""
    spec["fabric"]["rail_optimized"]["nodes_per_su"] = 54
    spec["fabric"]["rail_optimized"]["spines"]["links_per_leaf"] = 6


def test_three_domains_per_su_keep_only_the_base_size(gb200):
    """SUs of 54 trays hold 3 racks: a 36-tray block (2 racks) would join su1's third rack
    to su2's first. Before, the default was 18,36 (36 fits in an SU of 54 nodes)."""
    _su_of_54(gb200)
    names, sizes = _blocks(gb200)
    assert sizes == [18]
    assert len(names) == 12  # gb[001-216]: su1..su4, 3 racks each


def test_given_sizes_that_span_sus_are_refused(gb200):
    _su_of_54(gb200)
    gb200["fabric"]["rail_optimized"]["nvlink"]["block_sizes"] = [18, 36]
    (problem,) = [p for p in _refused(gb200).problems if p.path == "fabric.rail_optimized.nvlink.block_sizes"]
    assert problem.message == (
        "BlockSizes 36 joins 2 consecutive blocks, but SU su1 ends after 3 blocks, not on a multiple of 2, so "
        "such a block would span SUs su1 and su2, which Kueue and Volcano keep apart: keep the sizes to 18, or "
        "give every SU but the last a multiple of 2 NVLink domains with Slurm nodes")


def test_a_base_size_that_is_not_the_domain_is_refused(gb200):
    """Issue 19: 'a block size that does not divide the NVLink domain'."""
    gb200["fabric"]["rail_optimized"]["nvlink"]["block_sizes"] = [9, 18]
    (problem,) = [p for p in _refused(gb200).problems if p.path == "fabric.rail_optimized.nvlink.block_sizes"]
    assert problem.message.startswith(
        "the first block size is the base block: the Slurm nodes of one NVLink domain, 18 here, not 9")


def test_explicit_domains_are_listed_su_by_su(lab):
    """Domains listed out of SU order still become blocks SU by SU, so 2-block aggregates
    join the two domains of one SU."""
    lab["cluster"]["versions"]["slurm"] = "25.05"
    lab["partitions"]["slurm"]["topology"] = "block"
    lab["partitions"]["slurm"]["partitions"][0]["nodes"] = "gpu[001-004]"
    nodes = {"a": ["gpu001", "gpu002", "kw1"], "b": ["gpu003", "gpu004", "kw2"]}
    switches = [{"name": f"lf{g}", "tier": "leaf", "radix": 8} for g in "ab"] + [
        {"name": "sp", "tier": "spine", "radix": 8}]
    links = [{"a": n, "b": f"lf{g}", "count": 2} for g in "ab" for n in nodes[g]]
    links += [{"a": f"lf{g}", "b": "sp"} for g in "ab"]
    domains = [{"name": "d1", "nodes": "gpu001"}, {"name": "d3", "nodes": "gpu003"},
               {"name": "d2", "nodes": "gpu002"}, {"name": "d4", "nodes": "gpu004"},
               {"name": "k1", "nodes": "kw1"}, {"name": "k2", "nodes": "kw2"}]
    lab["fabric"] = {"link_speed": "400G", "explicit": {"switches": switches, "links": links,
                                                        "nvlink": {"domains": domains}}}
    conf = render(_plan(lab))["slurm/topology.conf"]
    assert [line.split()[0] for line in conf.splitlines() if line.startswith("BlockName=")] == [
        "BlockName=d1", "BlockName=d2", "BlockName=d3", "BlockName=d4"]
    assert "BlockSizes=1,2\n" in conf


def _partial(spec: dict, version: str) -> dict:
    """Slurm keeps gb[001-210]; rack 12 (gb[199-216]) gives Slurm 12 of its 18 trays."""
    spec["cluster"]["versions"]["slurm"] = version
    spec["partitions"]["slurm"]["partitions"] = [
        {"name": "gb200", "nodes": "gb[001-210]", "default": True}]
    spec["partitions"]["kubernetes"]["workers"] = "gb[211-288]"
    return spec


def test_a_partial_block_is_refused_where_slurm_stops_on_it(gb200):
    spec = _partial(gb200, "24.11")
    spec["partitions"]["slurm"]["topology"] = "block"
    (problem,) = [p for p in _refused(spec).problems if p.path == "fabric.rail_optimized.nvlink.domain_nodes"]
    assert problem.message == (
        "NVLink domain nvl12 has 12 Slurm node(s), fewer than the base block size 18; Slurm 24.11 refuses such "
        "a block (slurmctld: fatal: Block configuration (nvl12) children count lower than bblock_node_cnt): put "
        "all of the domain's nodes in Slurm partitions (spares and Kubernetes workers are outside its block), or "
        "target Slurm 25.05 or later (cluster.versions.slurm), which accepts it")


def test_a_partial_block_is_a_note_from_25_05(gb200):
    plan = _plan(_partial(gb200, "25.05"))
    (note,) = [n for n in plan.notes if n.path == "fabric.rail_optimized.nvlink.domain_nodes"]
    assert note.message.startswith("NVLink domain nvl12 has 12 Slurm node(s), fewer than the base block size 18")
    assert "only if that needs at most 12 node(s)" in note.message
    assert note.line


def test_a_partial_block_under_a_tree_is_no_concern(gb200):
    """With topology: tree no block is written, so 24.11 has nothing to stop on."""
    spec = _partial(gb200, "24.11")
    spec["partitions"]["slurm"]["topology"] = "tree"
    plan = _plan(spec)
    assert plan.slurm.topology_format == "tree" and not plan.slurm.blocks


def test_render_prints_the_partial_block_note(gb200, tmp_path, capsys):
    """The note reaches whoever renders, not only `railyard validate`."""
    from railyard.cli import main

    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(_partial(gb200, "25.05"), sort_keys=False))
    assert main(["render", str(spec), "-o", str(tmp_path / "out")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "note fabric.rail_optimized.nvlink.domain_nodes" in printed
    assert "NVLink domain nvl12 has 12 Slurm node(s), fewer than the base block size 18" in printed

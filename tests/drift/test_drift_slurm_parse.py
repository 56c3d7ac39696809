"""scontrol parsers on output recorded from real Slurm 22.05 (fixtures/slurm, see README)."""

from __future__ import annotations

import pytest

from railyard.drift.slurm import (
    parse_nodes,
    parse_partitions,
    parse_records,
    parse_topology,
    split_reason,
    time_seconds,
)
from tests.drift.recorded import slurm_text


def test_topology_records_and_hostlists():
    switches, blocks = parse_topology(slurm_text("clean", "show_topology"))
    assert blocks == []
    assert [(s.name, s.level, s.link_speed, s.nodes, s.switches) for s in switches] == [
        ("su1", 0, "800", ("gpu001", "gpu002"), ()),
        ("su2", 0, "800", ("gpu003", "gpu004"), ()),
        # 22.05 lists every node below an upper-level switch too
        ("spine", 1, "800", ("gpu001", "gpu002", "gpu003", "gpu004"), ("su1", "su2")),
    ]


def test_topology_line_exactly_as_slurm_prints_it():
    (rec,) = parse_records("SwitchName=su1 Level=0 LinkSpeed=800 Nodes=gpu[001-002]\n")
    assert rec == {"SwitchName": "su1", "Level": "0", "LinkSpeed": "800", "Nodes": "gpu[001-002]"}


def test_no_topology_plugin_is_empty_output():
    assert slurm_text("no_topology", "show_topology") == ""
    assert "No topology information available" in slurm_text("no_topology", "show_topology_stderr")
    assert parse_topology(slurm_text("no_topology", "show_topology")) == ([], [])


def test_multiline_and_oneliner_node_records_are_the_same():
    multi = parse_records(slurm_text("clean", "show_node"))
    one = parse_records(slurm_text("clean", "show_node_oneliner"))
    assert [r["NodeName"] for r in multi] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    # CPULoad, FreeMem and the start times moved between the two calls; the rest did not
    moving = {"CPULoad", "FreeMem", "SlurmdStartTime", "LastBusyTime"}
    assert [{k: v for k, v in r.items() if k not in moving} for r in multi] == [
        {k: v for k, v in r.items() if k not in moving} for r in one
    ]


def test_values_with_spaces_and_equals_signs_stay_whole():
    rec = parse_records(slurm_text("clean", "show_node"))[0]
    assert rec["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert rec["CfgTRES"] == "cpu=2,mem=1000M,billing=2"
    assert rec["AllocTRES"] == ""
    assert rec["MCS_label"] == "N/A"
    assert rec["Gres"] == "gpu:standin:2"


def test_clean_nodes():
    nodes = parse_nodes(slurm_text("clean", "show_node"))
    assert [(n.name, n.state, n.reason) for n in nodes] == [(f"gpu00{i}", "IDLE", "") for i in range(1, 5)]
    n = nodes[0]
    assert (n.cpus, n.sockets, n.cores_per_socket, n.threads_per_core, n.real_memory, n.gres, n.partitions) == (
        2, 1, 2, 1, 1000, "gpu:standin:2", ("gpu",))


def test_drained_and_down_with_reasons():
    nodes = {n.name: n for n in parse_nodes(slurm_text("drained_down", "show_node"))}
    assert nodes["gpu002"].state == "IDLE+DRAIN"
    assert nodes["gpu002"].state_tokens == ("IDLE", "DRAIN")
    assert nodes["gpu002"].reason == "maintenance"
    assert nodes["gpu002"].reason_by == "root@2026-12-03T06:53:58"
    assert nodes["gpu003"].state == "DOWN"
    assert nodes["gpu003"].reason == "slurmd stopped for test"


def test_not_responding_and_invalid_registration():
    stopped = {n.name: n for n in parse_nodes(slurm_text("slurmd_stopped", "show_node"))}
    assert stopped["gpu003"].state_tokens == ("DOWN", "NOT_RESPONDING")
    assert stopped["gpu003"].reason == "Not responding"
    (bad,) = parse_nodes(slurm_text("invalid_reg", "show_node"))
    assert bad.state_tokens == ("UNKNOWN", "DRAIN", "INVALID_REG")
    assert bad.reason == "gres/gpu count reported lower than configured (0 < 2)"


def test_reason_runs_to_its_user_and_time_even_on_one_line():
    text = ("NodeName=gpu002 State=IDLE+DRAIN Reason=set State=drain by Ops=me, see TICKET-1 "
            "[alice@2026-12-01T10:00:00] Comment=(null)\n")
    (node,) = parse_nodes(text)
    assert node.reason == "set State=drain by Ops=me, see TICKET-1"
    assert node.reason_by == "alice@2026-12-01T10:00:00"
    assert parse_records(text)[0]["Comment"] == "(null)"


def test_sinfo_style_star_means_not_responding():
    (node,) = parse_nodes("NodeName=gpu001 State=IDLE*+DRAIN\n")
    assert node.state_tokens == ("IDLE", "NOT_RESPONDING", "DRAIN")


def test_split_reason_without_suffix():
    assert split_reason("plain words") == ("plain words", "")


def test_partition_record():
    (p,) = parse_partitions(slurm_text("clean", "show_partition"))
    assert p.name == "gpu"
    assert p.nodes == ("gpu001", "gpu002", "gpu003", "gpu004")
    assert (p.default, p.max_time, p.default_time, p.state) == (True, "1-00:00:00", "NONE", "UP")
    assert p.job_defaults == (("DefCpuPerGPU", "1"),)


def test_partition_with_extra_node_and_down():
    (p,) = parse_partitions(slurm_text("extra_node_topology_changed", "show_partition"))
    assert p.nodes[-1] == "gpu009"
    (down,) = parse_partitions(slurm_text("drained_down", "show_partition"))
    assert down.state == "DOWN"


def test_partition_without_job_defaults():
    (p,) = parse_partitions("PartitionName=debug\n   Nodes=gpu001 Default=NO MaxTime=UNLIMITED\n"
                            "   State=UP JobDefaults=(null)\n")
    assert (p.job_defaults, p.max_time, p.nodes) == ((), "UNLIMITED", ("gpu001",))


def test_no_records():
    assert parse_records("") == []
    assert parse_nodes("No nodes in the system\n") == []


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("30:15", 1815), ("24:00:00", 86400), ("1-00:00:00", 86400), ("2-12", 216000),
    ("1-02:03", 93780), ("UNLIMITED", None), ("INFINITE", None), ("NONE", None), (None, None),
])
def test_time_forms(text, seconds):
    assert time_seconds(text) == seconds


def test_bad_time():
    with pytest.raises(ValueError, match="not a Slurm time"):
        time_seconds("soon")

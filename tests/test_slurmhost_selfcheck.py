"""Self-check of tests/support/slurmhost.py against a real 22.05 slurmctld.

The sample cluster is written here by hand (not rendered by railyard), so a
failure points at the harness or the host, not at the compiler.  Messages
asserted below are what Debian 12's slurm-wlm 22.05.8 really prints.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.support.slurmhost import (
    SlurmctldError,
    SlurmHost,
    expand,
    parse_kv_line,
    slurm_missing_reason,
)

MISSING = slurm_missing_reason()


def needs_slurm(test):
    """Mark a test as starting real daemons; skip it (with the reason) without Slurm."""
    skip = pytest.mark.skipif(MISSING is not None, reason=f"no Slurm on this host: {MISSING}")
    return pytest.mark.slurm(skip(test))


SLURM_CONF = """\
# hand-written sample cluster for the harness self-check
ClusterName=lab
SlurmctldHost=head01
AuthType=auth/munge
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
TopologyPlugin=topology/tree
NodeName=gpu[001-004] CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 Gres=gpu:h100:2 State=UNKNOWN
PartitionName=gpu Nodes=gpu[001-004] Default=YES MaxTime=INFINITE State=UP
"""

TOPOLOGY_CONF = """\
SwitchName=su1   Nodes=gpu[001-002]
SwitchName=su2   Nodes=gpu[003-004]
SwitchName=spine Switches=su[1-2]
"""

EXPECTED_TOPOLOGY = [
    {"SwitchName": "su1", "Level": 0, "Nodes": {"gpu001", "gpu002"}, "Switches": set()},
    {"SwitchName": "su2", "Level": 0, "Nodes": {"gpu003", "gpu004"}, "Switches": set()},
    {
        "SwitchName": "spine",
        "Level": 1,
        "Nodes": {"gpu001", "gpu002", "gpu003", "gpu004"},
        "Switches": {"su1", "su2"},
    },
]


def write_conf(
    tmp_path: Path, slurm: str = SLURM_CONF, topology: str | None = TOPOLOGY_CONF, **extra: str
) -> Path:
    d = tmp_path / "conf"
    d.mkdir()
    (d / "slurm.conf").write_text(slurm)
    if topology is not None:
        (d / "topology.conf").write_text(topology)
    for name, text in extra.items():
        (d / name.replace("_", ".")).write_text(text)
    return d


def comparable(topology: list[dict]) -> list[dict]:
    keys = ("SwitchName", "Level", "Nodes", "Switches")
    return [{k: sw[k] for k in keys} for sw in topology]


# --------------------------------------------------------------- no daemons


def test_parse_kv_line_keeps_values_with_spaces():
    rec = parse_kv_line("NodeName=gpu001 State=DOWN+NOT_RESPONDING Reason=Not responding [root@x]")
    assert rec == {
        "NodeName": "gpu001",
        "State": "DOWN+NOT_RESPONDING",
        "Reason": "Not responding [root@x]",
    }
    assert expand("su[1-2],spine") == {"su1", "su2", "spine"}
    assert expand("(null)") == frozenset()


def test_rewrite_changes_only_host_specific_settings(tmp_path):
    slurm = (
        "ControlMachine=head00\n"
        "SlurmctldHost=head01\nslurmctldhost=head02  # backup\n"
        "StateSaveLocation=/var/spool/slurmctld\nSlurmUser=slurm\n"
        "AuthInfo=socket=/run/munge/munge.socket.2,ttl=60\n"
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=head01\n"
        "AccountingStorageTRES=gres/gpu\n"
        "NodeName=DEFAULT RealMemory=1000\n"
        "NodeName=gpu[001-004] NodeAddr=10.0.0.[1-4] CPUs=2 Gres=gpu:h100:2\n"
        "PartitionName=gpu Nodes=gpu[001-004] Default=YES\n"
    )
    host = SlurmHost(write_conf(tmp_path, slurm))
    host.prepare()
    try:
        text = host.slurm_conf.read_text()
        lines = [line for line in text.splitlines() if line and not line.startswith("#")]
        keys = [line.split("=", 1)[0].lower() for line in lines]
        assert keys.count("slurmctldhost") == 1
        assert f"SlurmctldHost={host.hostname}(127.0.0.1)" in lines
        assert "controlmachine" not in keys
        assert f"AuthInfo=socket={host.munge_socket},ttl=60" in lines
        assert f"StateSaveLocation={host.workdir / 'state'}" in lines
        assert "AccountingStorageType=accounting_storage/none" in lines
        assert "accountingstoragetres" not in keys and "accountingstoragehost" not in keys
        assert "NodeName=DEFAULT RealMemory=1000" in lines
        assert "NodeName=gpu[001-004] NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:h100:2" in lines
        assert "PartitionName=gpu Nodes=gpu[001-004] Default=YES" in lines
        assert (host.slurm_conf.parent / "topology.conf").read_text() == TOPOLOGY_CONF
    finally:
        host.stop()
    assert not host.workdir.exists()


# ------------------------------------------------------------ real slurmctld


@needs_slurm
def test_sample_cluster_topology_nodes_partitions(tmp_path):
    t0 = time.monotonic()
    with SlurmHost(write_conf(tmp_path)) as host:
        ready = time.monotonic() - t0
        assert comparable(host.show_topology()) == EXPECTED_TOPOLOGY
        assert all(sw["LinkSpeed"] == "1" for sw in host.show_topology())

        nodes = {n["NodeName"]: n for n in host.show_nodes()}
        assert set(nodes) == {"gpu001", "gpu002", "gpu003", "gpu004"}
        for n in nodes.values():
            # No gres.conf: 22.05 slurmctld takes Gres= from slurm.conf alone.
            assert n["Gres"] == "gpu:h100:2"
            assert (n["CPUTot"], n["Sockets"], n["CoresPerSocket"]) == ("2", "1", "2")
            assert n["RealMemory"] == "1000"
            assert n["NodeAddr"] == "127.0.0.1" and n["NodeHostName"] == n["NodeName"]

        (part,) = host.show_partitions()
        assert part["PartitionName"] == "gpu" and part["Default"] == "YES"
        assert expand(part["Nodes"]) == set(nodes)
        assert "ClusterName" in host.scontrol("show", "config")
        t1 = time.monotonic()
    stop = time.monotonic() - t1
    print(f"slurmctld start->ready {ready:.2f}s, stop {stop:.2f}s")
    assert not host.workdir.exists()


@needs_slurm
def test_hostlist_in_switchname_is_fatal(tmp_path):
    # SwitchName= takes no hostlist: one switch literally named "su1-rail[0-1]".
    topo = "SwitchName=su1-rail[0-1] Nodes=gpu[001-004]\nSwitchName=spine Switches=su1-rail[0-1]\n"
    fatal = SlurmHost(write_conf(tmp_path, topology=topo)).expect_fatal()
    assert fatal == "fatal: Switch configuration spine has invalid child (su1-rail1)"


@needs_slurm
def test_node_under_no_switch_is_only_logged(tmp_path):
    topo = "SwitchName=su1 Nodes=gpu[001-002]\nSwitchName=su2 Nodes=gpu003\nSwitchName=spine Switches=su[1-2]\n"
    with SlurmHost(write_conf(tmp_path, topology=topo)) as host:
        # Not fatal on 22.05: slurmctld runs, logs an error, and gpu004 is in no switch.
        assert host.log_lines("switches lack access") == [
            "slurmctld: error: WARNING: switches lack access to 1 nodes: gpu004"
        ]
        assert host.log_lines("no switch can reach all nodes")
        spine = {sw["SwitchName"]: sw for sw in host.show_topology()}["spine"]
        assert spine["Nodes"] == {"gpu001", "gpu002", "gpu003"}


@needs_slurm
def test_missing_topology_conf_fails_fast(tmp_path):
    with pytest.raises(SlurmctldError) as err:
        SlurmHost(write_conf(tmp_path, topology=None), timeout=20).start()
    assert "cannot stat file" in err.value.fatal and "topology.conf" in err.value.fatal


@needs_slurm
def test_gres_without_grestypes_is_silently_dropped(tmp_path):
    slurm = SLURM_CONF.replace("GresTypes=gpu\n", "")
    with SlurmHost(write_conf(tmp_path, slurm)) as host:
        assert {n["Gres"] for n in host.show_nodes()} == {"(null)"}


@needs_slurm
def test_unreachable_slurmdbd_is_fatal_unless_rewritten(tmp_path):
    # A loopback port with nobody listening: an unresolvable AccountingStorageHost
    # fails the same way but only after 22.05's 10 s of getaddrinfo() retries.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    slurm = SLURM_CONF.replace(
        "AccountingStorageType=accounting_storage/none",
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={port}\n"
        "AccountingStorageTRES=gres/gpu",
    )
    conf = write_conf(tmp_path, slurm)
    fatal = SlurmHost(conf, accounting="keep").expect_fatal()
    assert fatal.startswith("fatal: You are running with a database but for some reason")
    with SlurmHost(conf) as host:
        assert host.scontrol("ping").strip().endswith("is UP")

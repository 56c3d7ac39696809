"""slurm_controller's restart-or-reconfigure rule (roles/slurm_controller/filter_plugins)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "slurm_conf_filter", ROOT / "roles/slurm_controller/filter_plugins/slurm_conf.py"
)
sc = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sc
_spec.loader.exec_module(sc)

LAB = ROOT / "inventories/lab/cluster.yaml"


@pytest.fixture(scope="module")
def conf() -> str:
    from railyard.load import load_plan
    from railyard.render import render

    return render(load_plan(LAB))["slurm/slurm.conf"]


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_first_install_is_a_restart(conf):
    assert sc.slurm_conf_change("", conf) == "restart"
    assert sc.slurm_conf_change(None, conf) == "restart"


def test_comments_and_blank_lines_need_nothing(conf):
    assert sc.slurm_conf_change(conf, "# a comment\n\n" + conf.replace("\n", "  \n")) == "none"


def test_keys_are_case_insensitive(conf):
    assert sc.slurm_conf_change(conf, edit(conf, "MailProg=", "mailprog=")) == "none"


@pytest.mark.parametrize(
    "old,new",
    [
        ("SchedulerParameters=max_switch_wait=1800", "SchedulerParameters=max_switch_wait=60"),
        ("MaxTime=1-00:00:00", "MaxTime=2-00:00:00"),  # a partition attribute
        ("ReturnToService=2", "ReturnToService=1"),
        ("MailProg=/bin/true", "MailProg=/usr/bin/mail"),
    ],
)
def test_reconfigurable(conf, old, new):
    assert sc.slurm_conf_change(conf, edit(conf, old, new)) == "reconfigure"


@pytest.mark.parametrize(
    "old,new",
    [
        ("NodeName=gpu[001-004]", "NodeName=gpu[001-005]"),  # node added
        ("RealMemory=1000", "RealMemory=900"),  # node changed
        ("PartitionName=gpu Nodes=gpu[001-004]", "PartitionName=gpu Nodes=gpu[001-003]"),
        ("SlurmctldHost=ctl1", "SlurmctldHost=ctl2"),
        ("SlurmctldPort=6817", "SlurmctldPort=6820"),
        ("SlurmdPort=6818", "SlurmdPort=6819"),
        ("AuthType=auth/munge", "AuthType=auth/none"),
        ("TopologyPlugin=topology/tree", "TopologyPlugin=topology/none"),
        ("SelectType=select/cons_tres", "SelectType=select/linear"),
        ("ProctrackType=proctrack/cgroup", "ProctrackType=proctrack/linuxproc"),
        ("TaskPlugin=task/cgroup,task/affinity", "TaskPlugin=task/affinity"),
        # a restart key the lab's file does not have: adding one
        ("ProctrackType=proctrack/cgroup\n", "ProctrackType=proctrack/cgroup\nJobContainerType=job_container/tmpfs\n"),
        ("GresTypes=gpu", "GresTypes=gpu,mps"),
        ("StateSaveLocation=/var/lib/slurm/slurmctld", "StateSaveLocation=/srv/slurm"),
    ],
)
def test_needs_restart(conf, old, new):
    assert sc.slurm_conf_change(conf, edit(conf, old, new)) == "restart"


def test_partition_added_or_removed_restarts(conf):
    extra = conf + "PartitionName=debug Nodes=gpu001 State=UP\n"
    assert sc.slurm_conf_change(conf, extra) == "restart"
    assert sc.slurm_conf_change(extra, conf) == "restart"


def test_a_restart_key_added_restarts(conf):
    assert sc.slurm_conf_change(conf, conf + "MaxJobCount=20000\n") == "restart"


def test_watched_tokens(conf):
    base = conf + "SlurmctldParameters=idle_on_node_suspend\n"
    assert sc.slurm_conf_change(base, edit(base, "idle_on_node_suspend", "idle_on_node_suspend,enable_configless")) == "restart"
    assert sc.slurm_conf_change(base, edit(base, "idle_on_node_suspend", "idle_on_node_suspend,reboot_from_controller")) == "reconfigure"


def test_value_lookup(conf):
    assert sc.slurm_conf_value(conf, "statesavelocation") == "/var/lib/slurm/slurmctld"
    assert sc.slurm_conf_value(conf, "SlurmUser") == "slurm"
    assert sc.slurm_conf_value(conf, "Nope", "x") == "x"


def test_slurm_action_on_copy_results(conf):
    changed = {"changed": True, "dest": "/etc/slurm/slurm.conf",
               "diff": [{"before": conf, "after": edit(conf, "ReturnToService=2", "ReturnToService=1")}]}
    restart = {"changed": True, "dest": "/etc/slurm/slurm.conf",
               "diff": [{"before": conf, "after": edit(conf, "SlurmdPort=6818", "SlurmdPort=7000")}]}
    topo = {"changed": True, "dest": "/etc/slurm/topology.conf", "diff": [{"before": "a", "after": "b"}]}
    skipped = {"skipped": True, "changed": False, "item": "gres.conf"}
    assert sc.slurm_action([skipped]) == "none"
    assert sc.slurm_action([changed, skipped]) == "reconfigure"
    assert sc.slurm_action([topo]) == "reconfigure"
    assert sc.slurm_action([topo, restart]) == "restart"
    # diff too big for Ansible (no after text): assume the worst
    assert sc.slurm_action([{"changed": True, "dest": "/etc/slurm/slurm.conf", "diff": [{}]}]) == "restart"
    # first install (no before)
    assert sc.slurm_action([{"changed": True, "dest": "/etc/slurm/slurm.conf", "diff": [{"before": "", "after": conf}]}]) == "restart"


def test_slurm_action_check_mode_results_name_the_file_by_item(conf):
    """In check mode copy reports no dest; the loop item (a file name) decides."""
    check = {"changed": True, "item": "slurm.conf",
             "diff": [{"before": conf, "after": edit(conf, "SlurmdPort=6818", "SlurmdPort=7000")}]}
    topo = {"changed": True, "item": "topology.conf", "diff": [{"before": "a", "after": "b"}]}
    assert sc.slurm_action([topo]) == "reconfigure"
    assert sc.slurm_action([topo, check]) == "restart"
    assert sc.slurm_action([{"changed": True, "item": {"dest": "/etc/slurm/topology.conf"}}]) == "reconfigure"


def test_a_new_primary_controller_beside_the_same_backup_is_a_restart():
    """SlurmctldHost is one line per controller: only the last line used to count."""
    old = "SlurmctldHost=ctl1(10.0.0.10)\nSlurmctldHost=ctl2(10.0.0.11)\nClusterName=lab\n"
    new = "SlurmctldHost=ctl3(10.0.0.12)\nSlurmctldHost=ctl2(10.0.0.11)\nClusterName=lab\n"
    assert sc.slurm_conf_change(old, new) == "restart"
    assert sc.slurm_conf_change(old, old) == "none"
    assert sc.slurm_conf_value(new, "SlurmctldHost") == "ctl3(10.0.0.12)\nctl2(10.0.0.11)"

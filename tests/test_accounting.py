"""Accounting: the spec's rules, slurm.conf's accounting and priority lines, the desired
associations, and the sacctmgr commands the role's module derives from a difference.

The module is tested here against sacctmgr's output as Slurm 24.11 prints it (a fake
``sacctmgr``); on real slurmdbd it runs in the lab and in molecule/slurm_cluster.
Expected values are literals or come from the spec, never from the compiler under test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from railyard.render import render
from tests.support import specs

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "slurm_associations", ROOT / "roles/slurm_controller/library/slurm_associations.py")
assoc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(assoc)


def _plan(spec: dict):
    return specs.plan(spec, "acct.yaml")


_refused = specs.refused_at


def _acct(lab: dict) -> dict:
    return lab["partitions"]["slurm"]["accounting"]


# ---------------------------------------------------------------- slurm.conf and the desired state


def test_accounting_turns_on_slurmdbd_gpu_tres_enforcement_and_fair_share(lab):
    conf = render(_plan(lab))["slurm/slurm.conf"].splitlines()
    for line in ("AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=ctl1",
                 "AccountingStorageTRES=gres/gpu", "AccountingStorageEnforce=associations,limits,qos,safe",
                 "PriorityType=priority/multifactor", "PriorityWeightFairshare=10000",
                 # the lab spec's short decay
                 "PriorityDecayHalfLife=0:30:00", "PriorityCalcPeriod=1"):
        assert line in conf, line


def test_without_accounting_no_slurmdbd_no_priority_and_no_associations(lab):
    del lab["partitions"]["slurm"]["accounting"]
    out = render(_plan(lab))
    conf = out["slurm/slurm.conf"]
    assert "AccountingStorageType=accounting_storage/none" in conf
    assert "Priority" not in conf and "accounting/associations.json" not in out
    plan = _plan(lab)
    assert "slurmdbd" not in plan.inventory.groups


def test_the_desired_associations_are_the_spec_in_sacctmgr_terms(lab):
    want = json.loads(render(_plan(lab))["accounting/associations.json"])
    assert want["cluster"] == "lab"
    assert want["qos"]["capped"]["MaxTRESPerUser"] == "gres/gpu=2"
    assert want["qos"]["capped"]["GrpTRES"] == ""  # unset: cleared, not left behind
    names = [a["name"] for a in want["accounts"]]
    assert names.index("research") < names.index("team-a")  # parents first
    shares = {a["name"]: a["options"]["Fairshare"] for a in want["accounts"]}
    assert shares == {"research": "1", "team-a": "3", "team-b": "1"}
    users = {u["name"]: u for u in want["users"]}
    assert users["alice"]["default_account"] == "team-a" and list(users["alice"]["accounts"]) == ["team-a"]


def test_a_child_listed_before_its_parent_is_created_after_it(lab):
    _acct(lab)["accounts"] = [{"name": "leaf", "parent": "mid"}, {"name": "mid", "parent": "top"}, {"name": "top"}]
    _acct(lab)["users"] = []
    want = json.loads(render(_plan(lab))["accounting/associations.json"])
    assert [a["name"] for a in want["accounts"]] == ["top", "mid", "leaf"]


def test_a_partition_qos_is_written_on_its_partition_line(lab):
    _acct(lab)["qos"].append({"name": "part-cap", "grp_tres": {"gres/gpu": 6}})
    lab["partitions"]["slurm"]["partitions"][0]["qos"] = "part-cap"
    conf = render(_plan(lab))["slurm/slurm.conf"]
    assert "PartitionName=gpu Nodes=gpu[001-004]" in conf and " QOS=part-cap State=UP" in conf


def test_slurmdbd_runs_where_the_spec_says_and_is_a_slurm_node(lab):
    plan = _plan(lab)
    assert plan.inventory.groups["slurmdbd"] == ("ctl1",)


# ---------------------------------------------------------------- refused


def test_no_database_host_is_refused(lab):
    del _acct(lab)["storage_host"]
    assert "required key 'storage_host' is missing" in _refused(lab, "partitions.slurm.accounting.storage_host")


def test_a_user_with_two_default_accounts_is_refused(lab):
    _acct(lab)["users"].append({"name": "alice", "default_account": "team-b"})
    msg = _refused(lab, "partitions.slurm.accounting.users[2]")
    assert "listed twice" in msg and "'team-a' and 'team-b'" in msg and "one default account" in msg


def test_a_qos_naming_an_unknown_tres_is_refused(lab):
    _acct(lab)["qos"][0]["max_tres_per_user"] = {"gres/tpu": 2}
    msg = _refused(lab, "partitions.slurm.accounting.qos[0].max_tres_per_user")
    assert "'gres/tpu' is not a TRES this cluster tracks" in msg and "gres/gpu" in msg


@pytest.mark.parametrize("shares", [0, -3])
def test_shares_below_one_are_refused(lab, shares):
    _acct(lab)["accounts"][1]["fairshare"] = shares
    assert f"{shares} shares" in _refused(lab, "partitions.slurm.accounting.accounts[1].fairshare")


def test_a_gpu_limit_on_a_partition_without_gpus_is_refused(lab):
    lab["nodes"].append({"group": "cpu", "names": "cpu1",
                         "hardware": {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1, "memory_mb": 1000}})
    lab["partitions"]["slurm"]["partitions"].append({"name": "cpu", "nodes": "cpu1", "qos": "capped"})
    msg = _refused(lab, "partitions.slurm.partitions[1].qos")
    assert "limits GPUs" in msg and "'cpu' has no node with GPUs" in msg


def test_a_gpu_type_no_node_has_is_refused(lab):
    _acct(lab)["qos"][0]["max_tres_per_user"] = {"gres/gpu:h100": 2}
    msg = _refused(lab, "partitions.slurm.accounting.qos[0].max_tres_per_user")
    assert "type 'h100'" in msg and "standin" in msg


def test_an_unknown_parent_and_a_cycle_are_refused(lab):
    _acct(lab)["accounts"][0]["parent"] = "team-a"  # research -> team-a -> research
    assert "form a cycle" in _refused(lab, "partitions.slurm.accounting.accounts[0].parent")
    _acct(lab)["accounts"][0]["parent"] = "nowhere"
    assert "'nowhere' is not in accounting.accounts" in _refused(lab, "partitions.slurm.accounting.accounts[0].parent")


def test_an_unknown_default_account_and_qos_are_refused(lab):
    _acct(lab)["users"][0]["default_account"] = "team-z"
    assert "'team-z'" in _refused(lab, "partitions.slurm.accounting.users[0].default_account")
    _acct(lab)["users"][0]["default_account"] = "team-a"
    _acct(lab)["accounts"][1]["qos"] = ["fast"]
    assert "QOS 'fast'" in _refused(lab, "partitions.slurm.accounting.accounts[1].qos[0]")


def test_the_database_on_another_node_of_the_spec_is_refused(lab):
    _acct(lab)["storage_host"] = "login1"
    assert "set storage_host: ctl1" in _refused(lab, "partitions.slurm.accounting.storage_host")


def test_slurmdbd_on_a_compute_node_is_refused(lab):
    _acct(lab)["host"] = "gpu001"
    _acct(lab)["storage_host"] = "gpu001"
    assert "compute node" in _refused(lab, "partitions.slurm.accounting.host")


def test_limits_without_limits_enforced_are_refused(lab):
    _acct(lab)["enforce"] = ["associations"]
    assert "lacks 'limits'" in _refused(lab, "partitions.slurm.accounting.enforce")


def test_a_hostile_account_name_never_reaches_a_file(lab):
    _acct(lab)["accounts"][0]["name"] = "x\nPriorityType=priority/basic"
    assert "not a Slurm account or QOS name" in _refused(lab, "partitions.slurm.accounting.accounts[0].name")


# ---------------------------------------------------------------- the module: difference -> sacctmgr


EMPTY = {"registered": False, "qos": {"normal": dict.fromkeys(assoc.QOS_COLUMNS, "")},
         "accounts": {}, "user_assocs": {}, "defaults": {}}
NO_LIMITS = {"GrpTRES": "", "MaxTRES": "", "MaxJobs": "", "QOS": "normal", "DefaultQOS": ""}


def _want(lab) -> dict:
    return json.loads(render(_plan(lab))["accounting/associations.json"])


def _as_shown(want: dict) -> dict:
    """What sacctmgr shows once ``want`` is applied, spelled as sacctmgr spells it."""
    qos = {"normal": dict.fromkeys(assoc.QOS_COLUMNS, "")}
    qos.update({n: dict(o) for n, o in want["qos"].items()})
    accounts = {"root": {"parent": "", "options": {**NO_LIMITS, "Fairshare": "1"}}}
    for a in want["accounts"]:
        opts = {**NO_LIMITS, **{k: v for k, v in a["options"].items() if v != ""}}
        accounts[a["name"]] = {"parent": a["parent"], "options": opts}
    users = {("root", "root"): {**NO_LIMITS, "Fairshare": "1"}}
    for u in want["users"]:
        for acct, opts in u["accounts"].items():
            users[(u["name"], acct)] = {**NO_LIMITS, **opts}
    return {"registered": True, "qos": qos, "accounts": accounts, "user_assocs": users,
            "defaults": {"root": "root", **{u["name"]: u["default_account"] for u in want["users"]}}}


def test_an_empty_database_gets_cluster_qos_accounts_and_users_in_order(lab):
    cmds, _before, after = assoc.plan(_want(lab), EMPTY)
    words = [" ".join(c) for c in cmds]
    assert words[0] == "add cluster lab"
    assert words.index("add qos capped") < words.index("add account research cluster=lab parent=root")
    assert words.index("add account research cluster=lab parent=root") < words.index(
        "add account team-a cluster=lab parent=research")
    assert "add user alice account=team-a cluster=lab defaultaccount=team-a" in words
    assert any(w.startswith("modify qos where name=capped set") and "MaxTRESPerUser=gres/gpu=2" in w for w in words)
    assert "modify account where name=team-a cluster=lab set Fairshare=3 QOS=capped,normal DefaultQOS=normal" in words
    assert "account team-a" in "\n".join(after)


def test_the_applied_state_needs_no_command(lab):
    want = _want(lab)
    assert assoc.plan(want, _as_shown(want)) == ([], [], [])


def test_sacctmgr_spellings_of_the_same_limits_compare_equal():
    assert assoc.normal("GrpTRES", "gres/gpu=2,cpu=4") == assoc.normal("GrpTRES", "cpu=4,gres/gpu=2")
    assert assoc.normal("GrpTRES", "mem=2G") == assoc.normal("GrpTRES", "mem=2048")
    assert assoc.normal("MaxWall", "1-00:00:00") == assoc.normal("MaxWall", "1440")
    assert assoc.normal("MaxWall", "02:00:00") == assoc.normal("MaxWall", "120")
    assert assoc.normal("QOS", "normal,capped") == assoc.normal("QOS", "capped,normal")


def test_a_limit_edited_by_hand_is_put_back_and_shown(lab):
    want = _want(lab)
    have = _as_shown(want)
    have["qos"]["capped"]["MaxTRESPerUser"] = "gres/gpu=8"
    cmds, before, after = assoc.plan(want, have)
    assert [" ".join(c) for c in cmds] == ["modify qos where name=capped set MaxTRESPerUser=gres/gpu=2"]
    assert any("MaxTRESPerUser=gres/gpu=8" in b for b in before)
    assert any("MaxTRESPerUser=gres/gpu=2" in a for a in after)


def test_a_limit_removed_from_the_spec_is_cleared(lab):
    want = _want(lab)
    have = _as_shown(want)
    have["qos"]["capped"]["GrpTRES"] = "gres/gpu=6,cpu=8"
    cmds, _, _ = assoc.plan(want, have)
    assert [" ".join(c) for c in cmds] == ["modify qos where name=capped set GrpTRES=gres/gpu=-1,cpu=-1"]


def test_what_the_spec_does_not_list_is_removed_children_first(lab):
    want = _want(lab)
    have = _as_shown(want)
    have["accounts"]["extra"] = {"parent": "root", "options": dict(NO_LIMITS)}
    have["accounts"]["extra-child"] = {"parent": "extra", "options": dict(NO_LIMITS)}
    have["user_assocs"][("mallory", "extra")] = dict(NO_LIMITS)
    have["user_assocs"][("alice", "team-b")] = dict(NO_LIMITS)
    have["qos"]["fast"] = dict.fromkeys(assoc.QOS_COLUMNS, "")
    cmds = [" ".join(c) for c in assoc.plan(want, have)[0]]
    assert cmds == [
        "delete user where name=mallory cluster=lab",
        "delete user where name=alice account=team-b cluster=lab",
        "delete account where name=extra-child cluster=lab",
        "delete account where name=extra cluster=lab",
        "delete qos where name=fast",
    ]


def test_root_and_normal_stay(lab):
    want = _want(lab)
    want["qos"], want["accounts"], want["users"] = {}, [], []
    cmds = [" ".join(c) for c in assoc.plan(want, _as_shown(_want(lab)))[0]]
    assert not any("root" in c or "normal" in c for c in cmds), cmds


def test_a_new_default_account_is_set(lab):
    want = _want(lab)
    have = _as_shown(want)
    have["defaults"]["alice"] = "team-b"
    assert [" ".join(c) for c in assoc.plan(want, have)[0]] == ["modify user where name=alice set defaultaccount=team-a"]


class FakeSacctmgr:
    """sacctmgr as far as the module uses it: `show` prints rows, writes answer like 24.11."""

    def __init__(self, shown: dict[str, str], refuse: str | None = None):
        self.shown, self.refuse, self.calls = shown, refuse, []

    def __call__(self, argv, **_kw):
        self.calls.append(argv[1:])
        if "show" in argv:
            return subprocess.CompletedProcess(argv, 0, self.shown.get(argv[argv.index("show") + 1], ""), "")
        if self.refuse and self.refuse in " ".join(argv):
            return subprocess.CompletedProcess(
                argv, 1, "", " Job(s) active, cancel job(s) before remove\n  JobID = 12  C = lab  A = extra  U = mallory\n")
        return subprocess.CompletedProcess(argv, 0, " Modified ...\n", "")


def test_observe_reads_sacctmgrs_parsable_output():
    fake = FakeSacctmgr({
        "cluster": "lab\n",
        "qos": "normal|0|||||||\ncapped|0||gres/gpu=2|||||\n",
        "association": "root||||1||||normal|\nroot|root||root|1||||normal|\nteam-a||research|3||||capped,normal|normal\n"
                       "team-a|alice|team-a|1||||capped,normal|\n",
        "user": "root|root\nalice|team-a\n",
    })
    have = assoc.observe(assoc.Sacctmgr("sacctmgr", run=fake), "lab")
    assert have["registered"] and have["qos"]["capped"]["MaxTRESPerUser"] == "gres/gpu=2"
    assert have["accounts"]["team-a"] == {"parent": "research", "options": {
        "Fairshare": "3", "GrpTRES": "", "MaxTRES": "", "MaxJobs": "", "QOS": "capped,normal", "DefaultQOS": "normal"}}
    assert ("alice", "team-a") in have["user_assocs"] and have["defaults"]["alice"] == "team-a"
    assert ["--noheader", "--parsable2", "show", "association", "where", "cluster=lab",
            "format=Account,User,ParentName,Fairshare,GrpTRES,MaxTRES,MaxJobs,QOS,DefaultQOS"] in fake.calls


def test_a_removal_sacctmgr_refuses_for_running_jobs_fails_naming_them():
    fake = FakeSacctmgr({}, refuse="name=mallory")
    s = assoc.Sacctmgr("sacctmgr", run=fake)
    with pytest.raises(assoc.SacctmgrError, match="(?s)Job\\(s\\) active.*U = mallory"):
        s.do(["delete", "user", "where", "name=mallory", "cluster=lab"])


def test_the_tres_the_limits_name_are_known_before_anything_is_set(lab):
    """slurmctld registers gres/gpu (AccountingStorageTRES) when it starts; until then
    sacctmgr refuses a gres/gpu limit, so the module waits for the TRES the spec names."""
    want = _want(lab)
    assert assoc.named_tres(want) == {"gres/gpu"}
    fake = FakeSacctmgr({"tres": "cpu|\nmem|\nenergy|\nnode|\nbilling|\nfs|disk\ngres|gpu\ngres|gpumem\n"})
    assert {"cpu", "gres/gpu", "fs/disk"} <= assoc.known_tres(assoc.Sacctmgr("sacctmgr", run=fake))


def test_many_users_take_a_few_commands_and_defaults_are_not_set_again(lab):
    """250 users of one account: 3 adds of at most 100 names; the 10 with shares 2 one
    modify; nobody gets a modify for what a new association has anyway (Fairshare=1)."""
    _acct(lab)["users"] = [{"name": f"u{i:03}", "default_account": "team-a", "fairshare": 2 if i < 10 else 1}
                           for i in range(250)]
    cmds = [c for c in assoc.plan(_want(lab), EMPTY)[0] if c[1] == "user"]
    adds = [c for c in cmds if c[0] == "add"]
    assert [len(c[2].split(",")) for c in adds] == [100, 100, 50]
    assert all(c[3:] == ["account=team-a", "cluster=lab", "defaultaccount=team-a"] for c in adds)
    mods = [c for c in cmds if c[0] == "modify"]
    assert mods == [["modify", "user", "where", "name=" + ",".join(f"u{i:03}" for i in range(10)), "account=team-a",
                     "cluster=lab", "set", "Fairshare=2"]]


def test_no_wall_limit_compares_equal_however_spelled():
    assert assoc.normal("MaxWall", "") == assoc.normal("MaxWall", "UNLIMITED") == assoc.normal("MaxWall", "INFINITE")
    assert assoc.normal("MaxWall", "") != assoc.normal("MaxWall", "60")

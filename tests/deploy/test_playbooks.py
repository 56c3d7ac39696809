"""The role table and the playbook planning: pure, no Ansible run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from railyard.apply.playbooks import (
    STEPS,
    Progress,
    changed_hosts,
    group_hosts,
    plan_playbooks,
    playbook_yaml,
    podman_overrides,
)
from railyard.load import load_plan, loads_plan
from railyard.render import render
from tests.conftest import ROOT


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for step in STEPS:
        (tmp_path / "roles" / step.role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / step.role / "tasks" / "main.yml").write_text("[]\n")
    shutil.copy(ROOT / "ansible.cfg", tmp_path / "ansible.cfg")
    return tmp_path


def test_table_is_in_dependency_order() -> None:
    seen: set[str] = set()
    for step in STEPS:
        assert set(step.after) <= seen, f"{step.role} waits for a later step"
        seen.add(step.role)


def test_one_role_at_a_time_on_a_host(lab_plan, root: Path) -> None:
    planned = plan_playbooks(lab_plan, root, render(lab_plan))[0]
    after = {p.role: set(p.after) for p in planned}

    def ancestors(role: str) -> set[str]:
        out = set(after[role])
        for a in after[role]:
            out |= ancestors(a)
        return out

    for i, a in enumerate(planned):
        for b in planned[i + 1:]:
            if set(a.hosts) & set(b.hosts):
                assert a.role in ancestors(b.role), f"{a.role} and {b.role} could run at once on shared hosts"
    assert "munge" not in ancestors("nfs_server") and "nfs_server" not in ancestors("munge")  # disjoint: parallel


def test_groups(lab_plan) -> None:
    assert group_hosts(lab_plan, "slurm") == ("ctl1", "login1", "gpu001", "gpu002", "gpu003", "gpu004")
    assert group_hosts(lab_plan, "slurm_compute:slurm_login") == ("gpu001", "gpu002", "gpu003", "gpu004", "login1")
    assert len(group_hosts(lab_plan, "all")) == 10
    assert group_hosts(lab_plan, "no_such_group") == ()


def test_a_change_reruns_exactly_the_roles_that_read_it(lab_plan, root: Path) -> None:
    artifacts = render(lab_plan)
    before = {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]}
    changed = dict(artifacts)
    changed["slurm/slurm.conf"] += "# edited\n"
    after = {p.role: p.digest for p in plan_playbooks(lab_plan, root, changed)[0]}
    assert {r for r in before if before[r] != after[r]} == {"slurm_controller", "slurm_compute", "slurm_login"}
    tests = root / "roles" / "munge" / "molecule" / "default"
    tests.mkdir(parents=True)
    (tests / "verify.yml").write_text("[]\n")  # a role's tests never reach a host
    assert {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]} == before
    (root / "roles" / "munge" / "tasks" / "main.yml").write_text("[] # edited\n")
    again = {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]}
    assert {r for r in before if before[r] != again[r]} == {"munge"}



def _uses(root: Path, role: str, names: list[str]) -> None:
    from railyard.apply import roles

    (root / "roles" / role / "meta").mkdir(exist_ok=True)
    (root / "roles" / role / "meta" / "railyard.yml").write_text(f"uses: {names}\n")
    roles._load.cache_clear()


def test_a_shared_task_file_reruns_exactly_the_roles_that_use_it(lab_plan, root: Path) -> None:
    """A role's digest covers the roles whose task files it imports (``uses`` in its
    meta/railyard.yml): an edit to roles/_shared re-runs munge and slurm_login, nothing else."""
    from railyard.apply import roles

    artifacts = render(lab_plan)
    shared = root / "roles" / "_shared" / "tasks"
    shared.mkdir(parents=True)
    (shared / "packages.yml").write_text("[]\n")
    before = {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]}
    assert "_shared" not in before  # a helper is never a step
    _uses(root, "munge", ["_shared"])
    _uses(root, "slurm_login", ["_shared"])
    declared = {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]}
    assert {r for r in before if before[r] != declared[r]} == {"munge", "slurm_login"}
    (shared / "packages.yml").write_text("[] # edited\n")
    (root / "roles" / "_shared" / "README.md").write_text("docs never reach a host\n")
    after = {p.role: p.digest for p in plan_playbooks(lab_plan, root, artifacts)[0]}
    assert {r for r in declared if declared[r] != after[r]} == {"munge", "slurm_login"}
    roles._load.cache_clear()


def test_uses_is_transitive_and_checked(root: Path) -> None:
    from railyard.apply import roles

    (root / "roles" / "_shared").mkdir()
    _uses(root, "kueue", ["k8s_control_plane"])
    _uses(root, "k8s_control_plane", ["_shared", "kueue"])  # a cycle ends at the role itself
    assert roles.uses(root, "kueue") == ("k8s_control_plane", "_shared")
    assert roles.uses(root, "munge") == ()
    _uses(root, "munge", "_shared")
    with pytest.raises(ValueError, match="uses must be a list of role names"):
        roles.uses(root, "munge")
    roles._load.cache_clear()


def test_no_step_is_a_helper_role() -> None:
    from railyard.apply import roles

    assert [s.role for s in STEPS if roles.is_helper(s.role)] == []

def test_lab_packages_are_optional(lab_plan, root: Path) -> None:
    planned = {p.role: p for p in plan_playbooks(lab_plan, root, render(lab_plan))[0]}
    assert planned["enroot"].vars["enroot_package"] == {"path": "/var/cache/railyard/packages/enroot_4.1.2-1_amd64.deb"}
    assert planned["enroot"].vars["enroot_package_required"] is False
    assert planned["lustre_client"].vars["lustre_client_package_required"] is False
    dgx = load_plan(ROOT / "inventories" / "dgx-h100" / "cluster.yaml")
    dgx_planned = {p.role: p for p in plan_playbooks(dgx, root, render(dgx))[0]}
    assert dgx_planned["enroot"].vars["enroot_package_required"] is True


def test_enroot_cgroups_hook_is_off_where_slurm_has_no_cgroups_and_in_the_lab(lab_plan, root: Path) -> None:
    """A site with cgroups runs enroot's 10-cgroups hook. Without cgroups a job has none for it
    to mount; in the lab's containers it fails every start from slurmstepd, with cgroups too."""
    assert lab_plan.spec.partitions.slurm.cgroups is True
    planned = {p.role: p for p in plan_playbooks(lab_plan, root, render(lab_plan))[0]}
    assert planned["enroot"].vars["enroot_hooks_disabled"] == ["10-cgroups.sh"]
    dgx = load_plan(ROOT / "inventories" / "dgx-h100" / "cluster.yaml")
    assert dgx.spec.partitions.slurm.cgroups is True
    dgx_planned = {p.role: p for p in plan_playbooks(dgx, root, render(dgx))[0]}
    assert dgx_planned["enroot"].vars["enroot_hooks_disabled"] == []
    spec = yaml.safe_load((ROOT / "inventories" / "dgx-h100" / "cluster.yaml").read_text())
    spec["partitions"]["slurm"]["cgroups"] = False
    del spec["partitions"]["slurm"]["pam_slurm_adopt"]  # it needs cgroups (validate says so)
    bare = loads_plan(yaml.safe_dump(spec))
    bare_planned = {p.role: p for p in plan_playbooks(bare, root, render(bare))[0]}
    assert bare_planned["enroot"].vars["enroot_hooks_disabled"] == ["10-cgroups.sh"]


def test_unwritten_roles_are_noted(lab_plan, root: Path) -> None:
    shutil.rmtree(root / "roles" / "slurm_controller")
    planned, notes = plan_playbooks(lab_plan, root, render(lab_plan))
    assert notes == ["role slurm_controller skipped: roles/slurm_controller/tasks/main.yml does not exist yet"]
    by_role = {p.role: p for p in planned}
    assert {"munge", "nfs_client", "lustre_client", "enroot"} <= set(by_role["slurm_compute"].after)


def test_playbook_is_one_play() -> None:
    import yaml

    assert yaml.safe_load(playbook_yaml("slurm", ["munge"])) == [
        {"name": "railyard: munge", "hosts": "slurm", "gather_facts": False, "strategy": "mitogen_free", "roles": ["munge"]}
    ]


def test_podman_hosts_move_to_the_pipelining_connection(lab_plan) -> None:
    import json

    inventory = json.loads(render(lab_plan)["ansible/inventory.json"])
    moved = podman_overrides(inventory)["all"]["hosts"]
    assert len(moved) == 10 and moved["ctl1"] == {"ansible_connection": "podman"}
    dgx = load_plan(ROOT / "inventories" / "dgx-h100" / "cluster.yaml")
    assert podman_overrides(json.loads(render(dgx)["ansible/inventory.json"])) == {}


def test_changed_hosts() -> None:
    olds = {"hosts": ["a", "b"], "instances": {"a": "1", "b": "2"}}
    assert changed_hosts(olds, {"hosts": ["a", "b"], "instances": {"a": "1", "b": "3"}}) == ["b"]
    assert changed_hosts(olds, {"hosts": ["a", "b", "c"], "instances": {"a": "1", "b": "2", "c": "4"}}) == ["c"]
    assert changed_hosts(olds, {"hosts": ["a"], "instances": {"a": "1"}}) == []


def _event(kind: str, host: str = "", task: str = "", role: str = "", **res) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, "role": role, "res": res}}


def test_progress_lines() -> None:
    p = Progress()
    assert p.feed(_event("playbook_on_task_start", task="Install", role="munge")) == [
        ("status", "TASK [munge : Install]")
    ]
    assert p.feed(_event("runner_on_ok", "gpu001", "Install", "munge", changed=True))[0][0] == "status"
    p.feed(_event("runner_on_ok", "gpu002", "Install", "munge", changed=True))
    p.feed(_event("runner_on_ok", "ctl1", "Install", "munge", changed=False))
    assert p.feed(_event("playbook_on_task_start", task="Start", role="munge")) == [
        ("status", "TASK [munge : Start]")
    ]
    failed = p.feed(_event("runner_on_failed", "ctl1", "Start", "munge", msg="unit munge.service not found\nmore"))
    assert failed == [("info", "FAILED: [ctl1] munge : Start: unit munge.service not found")]
    stats = {"event": "playbook_on_stats", "event_data": {
        "ok": {"gpu001": 2, "gpu002": 2, "ctl1": 1}, "changed": {"gpu001": 1, "gpu002": 1}, "failures": {"ctl1": 1},
    }}
    assert p.feed(stats) == [
        ("info", "changed: munge : Install on gpu[001-002]"),
        ("info", "recap: 3 hosts, ok=5 changed=2 failed=1 unreachable=0; changed on gpu[001-002]; FAILED on ctl1"),
    ]


def test_a_failed_command_says_why() -> None:
    """A command's "non-zero return code" gives way to its exit status and its stderr's last line."""
    p = Progress()
    err = "Warning: resource is missing an annotation\nError from server (Timeout): the server was unable to return a response\n"
    lines = p.feed(_event("runner_on_failed", "kcp1", "Apply", "k8s_control_plane", rc=1, stderr=err,
                          msg="non-zero return code"))
    assert lines == [("info", ("FAILED: [kcp1] k8s_control_plane : Apply: exit 1: "
                                "Error from server (Timeout): the server was unable to return a response"))]
    other = p.feed(_event("runner_on_failed", "kcp1", "Check", "k8s_control_plane", rc=2, stderr="x", msg="assertion failed"))
    assert other == [("info", "FAILED: [kcp1] k8s_control_plane : Check: assertion failed")]


def test_progress_never_shows_module_arguments() -> None:
    p = Progress()
    lines = p.feed({"event": "runner_on_failed", "event_data": {
        "host": "ctl1", "task": "Install the key", "role": "munge",
        "res": {"msg": "the output has been hidden due to the fact that 'no_log: true' was specified",
                "invocation": {"module_args": {"content": "SECRET"}}},
    }})
    assert "SECRET" not in repr(lines)


"""ansible-runner check-mode events -> per host/file changes (recorded events, fixtures/ansible)."""

from __future__ import annotations

import json

from railyard.drift.files import check_playbook, line_diff, summarize_events
from railyard.drift.observed import FileChange, TaskFailure, Unreachable
from tests.drift.recorded import events


def test_drifted_run_one_change_per_host_and_file():
    s = summarize_events(events("drifted"))
    assert s.finished
    assert set(s.seen) == {"gpu003", "gpu004"}
    assert [(c.host, c.role, c.change, c.path) for c in s.changes] == [
        ("gpu003", "slurm_compute", "modified", "/etc/slurm/slurm.conf"),
        ("gpu003", "slurm_compute", "service", "slurmd"),
        ("gpu003", "munge", "hidden", ""),
        ("gpu003", "pyxis", "created", "/etc/slurm/plugstack.conf.d/pyxis.conf"),
        ("gpu003", "nfs_client", "created", "/etc/systemd/system/shared.mount"),
        ("gpu003", "nfs_client", "attributes", "/shared"),
        ("gpu003", "nfs_server", "modified", "/etc/ganesha/ganesha.conf"),
    ]


def test_content_diff_is_summarised_not_dumped():
    s = summarize_events(events("drifted"))
    conf = s.changes[0]
    assert conf == FileChange(
        host="gpu003", role="slurm_compute", task="Install slurm.conf as rendered", change="modified",
        path="/etc/slurm/slurm.conf", plan_only=2, host_only=3,
        expected=("MpiDefault=none", "SchedulerParameters=max_switch_wait=1800"),
        observed=("MpiDefault=pmix", "DebugFlags=Gres", "SchedulerParameters=max_switch_wait=60"),
        module="ansible.builtin.copy",
    )
    ganesha = s.changes[-1]
    assert (ganesha.plan_only, ganesha.host_only) == (1, 1)
    assert ganesha.expected == ("        Clients = 10.77.0.0/24;",)
    assert ganesha.observed == ("        Clients = 10.77.0.0/16;",)


def test_missing_file_counts_the_plan_lines_only():
    pyxis = summarize_events(events("drifted")).changes[3]
    assert pyxis.change == "created"
    assert pyxis.plan_only == 3
    assert pyxis.expected == pyxis.observed == ()


def test_attributes_and_service():
    s = summarize_events(events("drifted"))
    mode = s.changes[5]
    assert (mode.expected, mode.observed) == (("mode=0755",), ("mode=0700",))
    service = s.changes[1]
    assert service.expected == ("state=started", "enabled=True")
    assert service.observed == ("ActiveState=inactive", "SubState=dead", "UnitFileState=static")


def test_no_log_task_is_reported_without_its_content():
    munge = summarize_events(events("drifted")).changes[2]
    assert munge == FileChange("gpu003", "munge", "Install the munge key", "hidden",
                               module="ansible.builtin.copy")
    raw = json.dumps([e for e in events("drifted") if (e.get("event_data") or {}).get("role") == "munge"])
    assert "another-key" not in raw and "plan-key-bytes" not in raw  # nor in the recording


def test_handlers_are_consequences_not_drift():
    tasks = [c.task for c in summarize_events(events("drifted")).changes]
    assert "Restart slurmd" not in tasks
    starts = [e for e in events("drifted") if e["event"] == "playbook_on_task_start"
              and e["event_data"]["task"] == "Restart slurmd"]
    assert starts and starts[0]["event_data"]["is_conditional"] is True


def test_a_host_still_reports_while_another_runs_its_handler():
    """The free strategy: gpu001 starts its handler, then gpu002's task result arrives."""
    handler = {"event": "playbook_on_task_start", "event_data": {
        "task": "Restart slurmd", "task_uuid": "h-1", "is_conditional": True, "play": "railyard: slurm_compute"}}
    handler_result = {"event": "runner_on_ok", "event_data": {
        "host": "gpu001", "task": "Restart slurmd", "task_uuid": "h-1", "play": "railyard: slurm_compute",
        "resolved_action": "ansible.builtin.systemd", "res": {"changed": True, "name": "slurmd", "state": "restarted"}}}
    late = {"event": "runner_on_ok", "event_data": {
        "host": "gpu002", "task": "Run slurmd", "task_uuid": "t-9", "play": "railyard: slurm_compute",
        "resolved_action": "ansible.builtin.systemd", "res": {"changed": True, "name": "slurmd", "state": "started"}}}
    changes = summarize_events([handler, handler_result, late]).changes
    assert [(c.host, c.task) for c in changes] == [("gpu002", "Run slurmd")]


def test_unreachable_host_with_a_short_reason():
    s = summarize_events(events("drifted"))
    assert s.unreachable == (
        Unreachable("gpu004", "Task failed: Failed to create temporary directory; exited with result 125"),
    )
    assert all(c.host != "gpu004" for c in s.changes)


def test_failure_is_reported_and_the_rest_of_that_role_ignored():
    s = summarize_events(events("drifted"))
    assert s.failures == (
        TaskFailure("gpu003", "lustre_client", "Check that LNet can load",
                    "lustre_client: the lnet kernel module is not available on this host"),
    )
    # the role's next task ("Install lustre.conf") would change a file; it ran on a broken premise
    assert not [c for c in s.changes if c.role == "lustre_client"]
    assert any(e["event_data"].get("task") == "Install lustre.conf as rendered" and e["event"] == "runner_on_ok"
               for e in events("drifted"))


def test_clean_run_has_nothing():
    s = summarize_events(events("clean"))
    assert s.finished
    assert s.seen == ("gpu003",)
    assert (s.changes, s.failures, s.unreachable) == ((), (), ())


def test_a_run_without_recap_is_not_finished():
    evs = [e for e in events("clean") if e["event"] != "playbook_on_stats"]
    assert summarize_events(evs).finished is False


def test_loop_items_count_once():
    item = {"event": "runner_item_on_ok", "stdout": "changed: [gpu001] => (item=a.mount)",
            "event_data": {"host": "gpu001", "role": "nfs_client", "task": "Install the mount units",
                           "resolved_action": "ansible.builtin.copy",
                           "res": {"changed": True, "dest": "/etc/systemd/system/a.mount",
                                   "diff": [{"before": "", "after": "[Mount]\n"}]}}}
    summary = {"event": "runner_on_ok", "stdout": "",
               "event_data": {"host": "gpu001", "role": "nfs_client", "task": "Install the mount units",
                              "res": {"changed": True, "results": [item["event_data"]["res"]]}}}
    s = summarize_events([item, summary])
    assert [(c.path, c.change) for c in s.changes] == [("/etc/systemd/system/a.mount", "created")]


def test_a_change_belongs_to_the_role_of_its_play():
    """kueue applies its objects with k8s_control_plane's objects.yml: re-running kueue, the
    play's role, is what restores them; a play railyard did not write keeps the task's role."""
    diff = {"host": "kcp1", "task": "Diff against the apiserver the objects of kueue.yaml",
            "resolved_action": "ansible.builtin.command", "res": {"changed": True, "stdout": "-  nominalQuota: 8"}}
    ours = {"event": "runner_on_ok", "event_data": {**diff, "play": "railyard: kueue", "role": "k8s_control_plane"}}
    other = {"event": "runner_on_ok", "event_data": {**diff, "play": "site", "role": "k8s_control_plane"}}
    assert [c.role for c in summarize_events([ours, other]).changes] == ["kueue", "k8s_control_plane"]


def test_file_that_should_not_exist_and_package_installs():
    absent = {"event": "runner_on_ok", "event_data": {
        "host": "gpu001", "role": "pyxis", "task": "Remove the other copy of pyxis.conf",
        "resolved_action": "ansible.builtin.file",
        "res": {"changed": True, "path": "/etc/slurm/plugstack.conf.d/pyxis.conf.inactive",
                "diff": {"before": {"path": "/etc/slurm/plugstack.conf.d/pyxis.conf.inactive", "state": "file"},
                         "after": {"path": "/etc/slurm/plugstack.conf.d/pyxis.conf.inactive", "state": "absent"}}}}}
    apt = {"event": "runner_on_ok", "event_data": {
        "host": "gpu001", "role": "slurm_compute", "task": "Install slurmd and the client commands",
        "resolved_action": "ansible.builtin.apt",
        "res": {"changed": True, "diff": {"prepared": "The following NEW packages will be installed:\n  slurmd\n"}}}}
    s = summarize_events([absent, apt])
    assert [(c.change, c.path, c.observed) for c in s.changes] == [
        ("removed", "/etc/slurm/plugstack.conf.d/pyxis.conf.inactive", ("state=file",)),
        ("task", "", ("The following NEW packages will be installed:", "slurmd")),
    ]


def test_line_diff_direction():
    # before is the host, after is the plan
    assert line_diff("a\nb\n", "a\nc\n") == (1, 1, ("c",), ("b",))


def test_check_playbook_one_play_per_role():
    plays = json.loads(check_playbook([("munge", "slurm"), ("pyxis", "slurm_compute:slurm_login")]))
    same = {"gather_facts": False, "strategy": "mitogen_free", "ignore_errors": True}
    assert plays == [
        {"name": "railyard: munge", "hosts": "slurm", "roles": ["munge"], **same},
        {"name": "railyard: pyxis", "hosts": "slurm_compute:slurm_login", "roles": ["pyxis"], **same},
    ]


def test_no_log_change_after_the_free_strategys_task_banner():
    """Live, the free strategy prints the task banner with a host's first result; no_log
    has hidden `changed` from the result, so only the callback's line tells ok from changed."""
    (censored,) = [e for e in events("drifted") if "censored" in ((e.get("event_data") or {}).get("res") or {})
                   and e["event"] == "runner_on_ok"]
    banner = "\r\nTASK [munge : Install the munge key] *******************************************\r\n"
    for line, hidden in (("changed: [gpu003]", True), ("ok: [gpu003]", False)):
        event = {**censored, "stdout": banner + line}
        changes = summarize_events([event]).changes
        assert [c.change for c in changes] == (["hidden"] if hidden else []), line


# `kubectl diff --server-side` as k8s_control_plane's objects.yml runs it (exit 1: it would change).
KUBECTL_DIFF = """\
diff -u -N /tmp/LIVE-2231944130/kueue.x-k8s.io.v1beta2.ClusterQueue..gpu /tmp/MERGED-1101384447/kueue.x-k8s.io.v1beta2.ClusterQueue..gpu
--- /tmp/LIVE-2231944130/kueue.x-k8s.io.v1beta2.ClusterQueue..gpu	2026-12-06 03:20:01.000000000 +0000
+++ /tmp/MERGED-1101384447/kueue.x-k8s.io.v1beta2.ClusterQueue..gpu	2026-12-06 03:20:01.000000000 +0000
@@ -4,7 +4,7 @@
   metadata:
     creationTimestamp: "2026-12-06T03:05:12Z"
-  generation: 2
+  generation: 3
   name: gpu
@@ -20,7 +20,7 @@
       - name: nvidia.com/gpu
-        nominalQuota: "8"
+        nominalQuota: "4"
diff -u -N /tmp/LIVE-2231944130/topology.volcano.sh.v1alpha1.HyperNode..su2 /tmp/MERGED-1101384447/topology.volcano.sh.v1alpha1.HyperNode..su2
--- /tmp/LIVE-2231944130/topology.volcano.sh.v1alpha1.HyperNode..su2	1970-01-01 00:00:00.000000000 +0000
+++ /tmp/MERGED-1101384447/topology.volcano.sh.v1alpha1.HyperNode..su2	2026-12-06 03:20:01.000000000 +0000
@@ -0,0 +1,12 @@
+apiVersion: topology.volcano.sh/v1alpha1
+kind: HyperNode
+metadata:
+  name: su2
diff -u -N /tmp/LIVE-2231944130/v1.Node..kw2 /tmp/MERGED-1101384447/v1.Node..kw2
--- /tmp/LIVE-2231944130/v1.Node..kw2	2026-12-06 03:20:01.000000000 +0000
+++ /tmp/MERGED-1101384447/v1.Node..kw2	2026-12-06 03:20:01.000000000 +0000
@@ -12,6 +12,7 @@
     topology.railyard.dev/spine: spine
+    topology.railyard.dev/su: su2
   name: kw2
diff -u -N /tmp/LIVE-2231944130/kueue.x-k8s.io.v1beta2.LocalQueue.team-a.gpu /tmp/MERGED-1101384447/kueue.x-k8s.io.v1beta2.LocalQueue.team-a.gpu
--- /tmp/LIVE-2231944130/kueue.x-k8s.io.v1beta2.LocalQueue.team-a.gpu	2026-12-06 03:20:01.000000000 +0000
+++ /tmp/MERGED-1101384447/kueue.x-k8s.io.v1beta2.LocalQueue.team-a.gpu	2026-12-06 03:20:01.000000000 +0000
@@ -5,3 +5,3 @@
-  generation: 4
+  generation: 5
"""


def test_kubectl_diff_names_each_object_and_what_differs():
    """The objects check of kueue, volcano and k8s_worker: one change per object, named as
    the kubernetes layer names it; the server's own counters (generation) are not drift."""
    res = {"changed": True, "rc": 1, "stdout": KUBECTL_DIFF, "stderr": "", "msg": "non-zero return code"}
    ev = {"event": "runner_on_ok", "event_data": {
        "host": "kcp1", "play": "railyard: kueue", "role": "k8s_control_plane",
        "task": "Diff against the apiserver the objects of kueue.yaml", "resolved_action": "ansible.builtin.command",
        "res": res}}
    s = summarize_events([ev])
    assert [(c.change, c.path, c.plan_only, c.host_only, c.expected, c.observed) for c in s.changes] == [
        ("object_modified", "ClusterQueue/gpu", 1, 1, ('nominalQuota: "4"',), ('nominalQuota: "8"',)),
        ("object_created", "HyperNode/su2", 4, 0, (), ()),
        ("object_modified", "Node/kw2", 1, 0, ("topology.railyard.dev/su: su2",), ()),
    ]
    assert {c.role for c in s.changes} == {"kueue"}


def test_kubectl_diff_without_objects_stays_a_task_change():
    """A namespace the manifest creates does not exist yet: no diff output, the task itself is the change."""
    res = {"changed": True, "rc": 1, "stdout": "", "stderr": 'namespaces "team-a" not found', "msg": ""}
    ev = {"event": "runner_on_ok", "event_data": {
        "host": "kcp1", "play": "railyard: kueue", "task": "Diff against the apiserver the objects of kueue.yaml",
        "resolved_action": "ansible.builtin.command", "res": res}}
    (c,) = summarize_events([ev]).changes
    assert (c.change, c.path) == ("task", "")


def test_kubectl_diff_recorded_on_the_lab():
    """kubectl v1.35.4's diff of kueue.yaml, volcano.yaml and node-kw2.yaml on the lab's kcp1
    after the e2e's quota, HyperNode and label faults (fixtures/kubernetes/kubectl_diff.txt)."""
    from tests.drift.recorded import FIX

    stdout = (FIX / "kubernetes" / "kubectl_diff.txt").read_text()
    ev = {"event": "runner_on_ok", "event_data": {
        "host": "kcp1", "play": "railyard: kueue", "task": "Diff against the apiserver the objects of kueue.yaml",
        "resolved_action": "ansible.builtin.command", "res": {"changed": True, "rc": 1, "stdout": stdout}}}
    assert [(c.change, c.path, c.plan_only, c.host_only) for c in summarize_events([ev]).changes] == [
        ("object_modified", "ClusterQueue/gpu", 1, 1),
        ("object_created", "HyperNode/su2", 14, 0),  # 15 lines less the server's generation
        ("object_modified", "Node/kw2", 1, 0),
    ]

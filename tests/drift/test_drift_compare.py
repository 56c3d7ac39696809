"""compare(plan, observed) on recorded observations: each kind of drift the issue lists,
with the exact line an operator reads, and a clean cluster that reports nothing."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
import yaml

from railyard import exitcodes
from railyard.drift import compare
from railyard.drift.compare import subset_diff
from railyard.drift.kubernetes import observation, quantity
from railyard.drift.observed import (
    FileChange,
    FilesObservation,
    KubernetesObservation,
    Observed,
    SlurmNode,
    SlurmObservation,
    UnitState,
    Unreachable,
)
from railyard.load import loads_plan
from tests.conftest import ROOT
from tests.drift.recorded import clean_observed, files_obs, k8s_obs, nodes_obs, slurm_obs

UP = "`railyard up --stack lab`"
REFRESH = "`railyard up --stack lab --refresh`"
RESTART_CTLD = "if the file already matches, `systemctl restart slurmctld` on ctl1 loads it"


def lines(report) -> list[str]:
    return [f.line for f in report.findings]


def files_of(*changes: FileChange) -> FilesObservation:
    return FilesObservation(hosts=tuple(dict.fromkeys(c.host for c in changes)),
                            roles=tuple(dict.fromkeys(c.role for c in changes)), changes=changes)


# --------------------------------------------------------------------------- clean


def test_clean_cluster_reports_nothing(lab_plan):
    report = compare(lab_plan, clean_observed())
    assert report.findings == report.errors == report.notes == ()
    assert report.layers == ("nodes", "files", "slurm", "kubernetes")
    assert report.exit_code == exitcodes.OK


def test_clean_is_clean_ten_times_in_a_row(lab_plan):
    reports = {compare(lab_plan, clean_observed()) for _ in range(10)}
    assert len(reports) == 1 and next(iter(reports)).exit_code == exitcodes.OK


# --------------------------------------------------------------------------- files


def test_slurm_conf_edited_on_one_node(lab_plan):
    obs = files_obs("drifted")
    only = [c for c in obs.changes if c.path == "/etc/slurm/slurm.conf"]
    report = compare(lab_plan, Observed(files=replace(obs, changes=tuple(only), failures=(), unreachable=())))
    (f,) = report.findings
    assert f.line == ("gpu003: /etc/slurm/slurm.conf differs from the plan (2 plan lines missing, 3 extra) — "
                      f"{UP} re-applies role slurm_compute")
    assert (f.layer, f.subject, f.kind, f.role, f.path) == (
        "files", "gpu003", "file_changed", "slurm_compute", "/etc/slurm/slurm.conf")
    assert f.expected == "MpiDefault=none\nSchedulerParameters=max_switch_wait=1800"
    assert f.observed == "MpiDefault=pmix\nDebugFlags=Gres\nSchedulerParameters=max_switch_wait=60"
    assert report.exit_code == exitcodes.DRIFT


def test_every_recorded_file_drift(lab_plan):
    report = compare(lab_plan, Observed(files=files_obs("drifted")))
    assert lines(report) == [  # per host, by path
        (f"gpu003: role munge would change a secret (task 'Install the munge key'; no_log hides what) — "
        f"{UP} re-applies role munge"),
        (f"gpu003: /etc/ganesha/ganesha.conf differs from the plan (1 plan line missing, 1 extra) — "
        f"{UP} re-applies role nfs_server"),
        f"gpu003: /etc/slurm/plugstack.conf.d/pyxis.conf is missing — {UP} re-applies role pyxis",
        (f"gpu003: /etc/slurm/slurm.conf differs from the plan (2 plan lines missing, 3 extra) — "
        f"{UP} re-applies role slurm_compute"),
        f"gpu003: /etc/systemd/system/shared.mount is missing — {UP} re-applies role nfs_client",
        f"gpu003: /shared has mode=0700, the plan has mode=0755 — {UP} re-applies role nfs_client",
        (f"gpu003: service slurmd is inactive (dead), the plan has it started; is static at boot, the plan has "
        f"it enabled — {UP} re-applies role slurm_compute"),
        ("gpu004: Ansible cannot reach it, so its files were not checked (Task failed: Failed to create temporary "
        f"directory; exited with result 125) — bring it back ({REFRESH}), then check again"),
    ]
    # the failed role is an error: the check of lustre_client on gpu003 is incomplete
    assert [e.message for e in report.errors] == [
        ("gpu003: role lustre_client failed in check mode at 'Check that LNet can load': "
        "lustre_client: the lnet kernel module is not available on this host")
    ]
    assert report.exit_code == exitcodes.ERROR
    assert report.unreachable == ("gpu004",)


def test_topology_conf_changed_on_the_controller(lab_plan):
    change = FileChange("ctl1", "slurm_controller", "Install the rendered Slurm configuration", "modified",
                        "/etc/slurm/topology.conf", 1, 1, ("SwitchName=su2 Nodes=gpu[003-004] LinkSpeed=800",),
                        ("SwitchName=su2 Nodes=gpu003 LinkSpeed=800",))
    (f,) = compare(lab_plan, Observed(files=files_of(change))).findings
    assert f.line == ("ctl1: /etc/slurm/topology.conf differs from the plan (1 plan line missing, 1 extra) — "
                      f"{UP} re-applies role slurm_controller")


def test_munge_key_replaced_on_one_node(lab_plan):
    change = FileChange("gpu002", "munge", "Write the cluster key", "hidden")
    (f,) = compare(lab_plan, Observed(files=files_of(change))).findings
    assert f.line == ("gpu002: role munge would change a secret (task 'Write the cluster key'; no_log hides "
                      f"what) — {UP} re-applies role munge")
    assert (f.kind, f.expected, f.observed) == ("secret_changed", "", "")


def test_pyxis_conf_removed(lab_plan):
    change = FileChange("gpu001", "pyxis", "Install pyxis.conf as rendered (active)", "created",
                        "/etc/slurm/plugstack.conf.d/pyxis.conf", plan_only=3)
    (f,) = compare(lab_plan, Observed(files=files_of(change))).findings
    assert f.line == f"gpu001: /etc/slurm/plugstack.conf.d/pyxis.conf is missing — {UP} re-applies role pyxis"
    assert f.kind == "file_missing"


def test_api_objects_a_role_would_apply(lab_plan):
    """kubectl diff in the kueue, volcano and k8s_worker checks: the object, what differs,
    and the role (and host) whose re-run applies it again."""
    task = "Diff against the apiserver the objects of {}"
    quota = FileChange("kcp1", "kueue", task.format("kueue.yaml"), "object_modified", "ClusterQueue/gpu", 1, 1,
                       ('nominalQuota: "4"',), ('nominalQuota: "8"',))
    hypernode = FileChange("kcp1", "volcano", task.format("volcano.yaml"), "object_created", "HyperNode/su2", 12)
    label = FileChange("kw2", "k8s_worker", task.format("node-kw2.yaml"), "object_modified", "Node/kw2", 1, 0,
                       ("topology.railyard.dev/su: su2",))
    report = compare(lab_plan, Observed(files=files_of(quota, hypernode, label)))
    assert lines(report) == [
        (f"kcp1: ClusterQueue/gpu on the apiserver differs from the plan (1 plan line missing, 1 extra) — {UP} "
         "re-applies role kueue"),
        f"kcp1: HyperNode/su2 is missing from the apiserver (role volcano creates it) — {UP} re-applies role volcano",
        f"kw2: Node/kw2 on the apiserver differs from the plan (1 plan line missing) — {UP} re-applies role k8s_worker",
    ]
    assert [f.kind for f in report.findings] == ["object_changed", "object_missing", "object_changed"]
    assert report.findings[0].expected == 'nominalQuota: "4"' and report.findings[0].observed == 'nominalQuota: "8"'
    assert report.drifted_roles() == {"k8s_worker": ("kw2",), "kueue": ("kcp1",), "volcano": ("kcp1",)}


def test_kubelet_stopped_on_a_worker(lab_plan):
    kubelet = UnitState("kubelet.service", "active", "inactive", "dead", "enabled", "loaded", "k8s_worker")
    report = compare(lab_plan, Observed(nodes=nodes_obs(kw2={"services": (kubelet,)})))
    (f,) = report.findings
    assert f.line == ("kw2: kubelet.service is inactive (dead), the plan has it running — `systemctl start "
                      f"kubelet.service` on kw2, or {UP} re-applies role k8s_worker")
    assert report.drifted_roles() == {"k8s_worker": ("kw2",)}


def test_nfs_export_changed(lab_plan):
    obs = files_obs("drifted")
    (change,) = [c for c in obs.changes if c.role == "nfs_server"]
    (f,) = compare(lab_plan, Observed(files=files_of(replace(change, host="nfs1")))).findings
    assert f.line == ("nfs1: /etc/ganesha/ganesha.conf differs from the plan (1 plan line missing, 1 extra) — "
                      f"{UP} re-applies role nfs_server")
    assert (f.expected, f.observed) == ("        Clients = 10.77.0.0/24;", "        Clients = 10.77.0.0/16;")


@pytest.mark.parametrize(("plan_only", "host_only", "text"), [
    (1, 1, "1 plan line missing, 1 extra"), (2, 0, "2 plan lines missing"), (0, 1, "1 extra line"),
    (0, 3, "3 extra lines"), (0, 0, "whitespace only"),
])
def test_line_counts(lab_plan, plan_only, host_only, text):
    change = FileChange("gpu001", "slurm_compute", "t", "modified", "/etc/slurm/slurm.conf", plan_only, host_only)
    (f,) = compare(lab_plan, Observed(files=files_of(change))).findings
    assert f.message == f"gpu001: /etc/slurm/slurm.conf differs from the plan ({text})"


def test_a_file_that_should_not_exist(lab_plan):
    change = FileChange("gpu001", "pyxis", "Remove the other copy of pyxis.conf", "removed",
                        "/etc/slurm/plugstack.conf.d/pyxis.conf.inactive", observed=("state=file",))
    (f,) = compare(lab_plan, Observed(files=files_of(change))).findings
    assert f.line == ("gpu001: /etc/slurm/plugstack.conf.d/pyxis.conf.inactive should not exist (the plan "
                      f"removes it) — {UP} re-applies role pyxis")


# --------------------------------------------------------------------------- nodes


def test_node_container_deleted(lab_plan):
    nodes = nodes_obs(gpu004={"exists": False, "power": "off", "reachable": False, "detail": "no such container",
                              "services": ()})
    (f,) = compare(lab_plan, Observed(nodes=nodes)).findings
    assert f.line == f"gpu004: container railyard-lab-gpu004 does not exist — {REFRESH} creates it again"
    assert (f.layer, f.kind) == ("nodes", "missing")


def test_node_container_stopped_and_unanswering(lab_plan):
    nodes = nodes_obs(gpu001={"power": "off", "reachable": False, "detail": "exited", "services": ()},
                      gpu002={"reachable": False, "detail": "running", "services": ()})
    report = compare(lab_plan, Observed(nodes=nodes))
    assert lines(report) == [
        f"gpu001: container railyard-lab-gpu001 is not running (exited) — {REFRESH} starts it",
        ("gpu002: container railyard-lab-gpu002 is running but does not answer `podman exec` — check the machine "
        f"and its network; {REFRESH} once it answers"),
    ]
    assert report.unreachable == ("gpu002",)
    assert report.exit_code == exitcodes.DRIFT


def test_slurmd_stopped_is_an_inactive_unit(lab_plan):
    nodes = nodes_obs(gpu003={"units": {"slurmd.service": {"active": "inactive", "sub": "dead"}}})
    (f,) = compare(lab_plan, Observed(nodes=nodes)).findings
    assert f.line == ("gpu003: slurmd.service is inactive (dead), the plan has it running — "
                      f"`systemctl start slurmd.service` on gpu003, or {UP} re-applies role slurm_compute")
    assert (f.kind, f.path, f.expected, f.role) == ("unit_inactive", "slurmd.service", "active", "slurm_compute")
    assert f.observed == "ActiveState=inactive SubState=dead UnitFileState=enabled LoadState=loaded"


def test_mount_unit_removed(lab_plan):
    nodes = nodes_obs(gpu002={"units": {"shared.mount": {"load": "not-found", "file_state": ""}}})
    files = files_of(FileChange("gpu002", "nfs_client", "Install the mount units as rendered", "created",
                                "/etc/systemd/system/shared.mount", plan_only=15))
    assert lines(compare(lab_plan, Observed(nodes=nodes, files=files))) == [
        f"gpu002: shared.mount does not exist, the plan has it enabled — {UP} re-applies role nfs_client",
        f"gpu002: /etc/systemd/system/shared.mount is missing — {UP} re-applies role nfs_client",
    ]


def test_an_inactive_nfs_mount_is_not_drift_but_a_disabled_one_is(lab_plan):
    # the lab kernel has no NFS client: nfs_client enables the units and mounts nothing
    assert compare(lab_plan, Observed(nodes=nodes_obs())).findings == ()
    nodes = nodes_obs(kw1={"units": {"shared.mount": {"file_state": "disabled"}}},
                      gpu001={"units": {"munge.service": {"file_state": "masked", "active": "inactive"}}})
    assert lines(compare(lab_plan, Observed(nodes=nodes))) == [
        (f"gpu001: munge.service is masked, the plan has it running — `systemctl unmask munge.service` on gpu001, "
        f"then {UP} re-applies role munge"),
        (f"kw1: shared.mount is disabled at boot, the plan has it enabled — `systemctl enable shared.mount` on kw1, "
        f"or {UP} re-applies role nfs_client"),
    ]


# --------------------------------------------------------------------------- slurm


def test_slurmd_stopped_as_slurm_sees_it(lab_plan):
    (f,) = compare(lab_plan, Observed(slurm=slurm_obs(splice={"gpu003": "slurmd_stopped"}))).findings
    assert f.line == ("gpu003 is DOWN+NOT_RESPONDING (reason: 'Not responding') — slurmd on gpu003 does not "
                      f"answer: `systemctl start slurmd` on gpu003 (or {UP}); ReturnToService=2 then puts it "
                      "back in service")
    assert (f.layer, f.kind, f.observed) == ("slurm", "node_state", "DOWN+NOT_RESPONDING Reason=Not responding")


def test_node_drained_or_down(lab_plan):
    report = compare(lab_plan, Observed(slurm=slurm_obs(nodes="drained_down")))
    assert lines(report) == [
        ("gpu002 is DRAIN (reason: 'maintenance') — `scontrol update nodename=gpu002 state=resume` when it may "
        "run jobs again"),
        ("gpu003 is DOWN (reason: 'slurmd stopped for test') — `scontrol update nodename=gpu003 state=resume` "
        "when it may run jobs again"),
    ]


def test_partition_down(lab_plan):
    (f,) = compare(lab_plan, Observed(slurm=slurm_obs(partitions="drained_down"))).findings
    assert f.line == "partition gpu is DOWN, the plan has it UP — `scontrol update partitionname=gpu state=up`"
    assert f.subject == "partition/gpu"


def test_topology_changed_in_slurm(lab_plan):
    (f,) = compare(lab_plan, Observed(slurm=slurm_obs(topology="extra_node_topology_changed"))).findings
    assert f.line == ("topology: switch su2 has nodes gpu[003-004] in the plan but gpu003 in Slurm — "
                      f"{UP} restores topology.conf on ctl1; {RESTART_CTLD}")
    assert (f.subject, f.kind, f.expected, f.observed) == ("topology", "switch_nodes", "gpu[003-004]", "gpu003")


def test_node_registered_in_slurm_that_the_spec_lacks(lab_plan):
    obs = slurm_obs(nodes="extra_node_topology_changed", partitions="extra_node_topology_changed")
    report = compare(lab_plan, Observed(slurm=obs))
    assert lines(report) == [
        (f"node gpu009 is registered in Slurm but not in the spec — remove it from slurm.conf on ctl1 ({UP} "
        "restores the rendered file), or add it to the spec"),
        ("partition gpu has nodes gpu[001-004] in the plan but gpu[001-004,009] in Slurm — "
        f"{UP} restores slurm.conf on ctl1; {RESTART_CTLD}"),
    ]


def test_dynamic_node_is_deleted_with_scontrol(lab_plan):
    extra = SlurmNode("gpu010", "IDLE+DYNAMIC_NORM", partitions=())
    obs = slurm_obs()
    (f,) = compare(lab_plan, Observed(slurm=replace(obs, nodes=obs.nodes + (extra,)))).findings
    assert f.line == ("node gpu010 is registered in Slurm but not in the spec — `scontrol delete nodename=gpu010` "
                      "(a dynamic node), or add it to the spec")


def test_invalid_registration_and_nodes_slurm_does_not_know(lab_plan):
    report = compare(lab_plan, Observed(slurm=slurm_obs(nodes="invalid_reg")))
    assert lines(report) == [
        ("gpu001 is UNKNOWN+DRAIN+INVALID_REG (reason: 'gres/gpu count reported lower than configured (0 < 2)') — "
        "gpu001 registered with other hardware than slurm.conf says: make the spec's hardware match the node "
        f"(`slurmd -C` on gpu001), {UP}, then `scontrol update nodename=gpu001 state=resume`"),
        *[f"{n} is in the spec but not registered in Slurm — {UP} restores slurm.conf on ctl1; {RESTART_CTLD}"
          for n in ("gpu002", "gpu003", "gpu004")],
    ]


def test_node_hardware_in_slurm_differs(lab_plan):
    obs = slurm_obs()
    nodes = tuple(replace(n, real_memory=2000) if n.name == "gpu001" else n for n in obs.nodes)
    (f,) = compare(lab_plan, Observed(slurm=replace(obs, nodes=nodes))).findings
    assert f.line == (f"gpu001: Slurm has RealMemory=2000, the plan has 1000 — {UP} restores slurm.conf on ctl1; "
                      f"{RESTART_CTLD}")


def test_partition_settings(lab_plan):
    obs = slurm_obs()
    (p,) = obs.partitions
    changed = replace(p, max_time="12:00:00", default=False, job_defaults=())
    report = compare(lab_plan, Observed(slurm=replace(obs, partitions=(changed,))))
    assert [f.message for f in report.findings] == [
        "partition gpu: DefCpuPerGPU=unset in Slurm, the plan has DefCpuPerGPU=1",
        "partition gpu: Default=NO in Slurm, the plan has Default=YES",
        "partition gpu: MaxTime=12:00:00 in Slurm, the plan has MaxTime=1-00:00:00",
    ]


def test_equivalent_time_forms_are_not_drift(lab_plan):
    obs = slurm_obs()
    (p,) = obs.partitions
    same = replace(p, max_time="24:00:00")  # the plan says 1-00:00:00
    assert compare(lab_plan, Observed(slurm=replace(obs, partitions=(same,)))).findings == ()


def test_no_topology_in_slurm(lab_plan):
    (f,) = compare(lab_plan, Observed(slurm=slurm_obs(topology="no_topology"))).findings
    assert f.message == "topology: Slurm has no switches, the plan has 3 (TopologyPlugin=topology/tree)"


def test_extra_and_missing_partitions_and_switches(lab_plan):
    obs = slurm_obs()
    (p,) = obs.partitions
    spine = obs.switches[-1]
    report = compare(lab_plan, Observed(slurm=replace(
        obs, partitions=(replace(p, name="debug"),),
        switches=(*obs.switches[:2], replace(spine, name="core", level=2)))))
    assert [f.message for f in report.findings] == [
        "partition debug is in Slurm but not in the spec",
        "partition gpu is in the spec but not in Slurm",
        "topology: switch spine is in the plan but not in Slurm",
        "topology: switch core is in Slurm but not in the plan",
    ]


def test_controller_unreachable_and_slurmctld_down(lab_plan):
    gone = SlurmObservation("ctl1", unreachable=Unreachable("ctl1", "no such container"))
    (f,) = compare(lab_plan, Observed(slurm=gone)).findings
    assert f.line == ("ctl1: the Slurm controller does not answer, so Slurm was not checked (no such container) — "
                      f"bring it back ({REFRESH}), then check again")
    assert f.kind == "unreachable"
    down = SlurmObservation("ctl1", failure="slurm_load_partitions: Unable to contact slurm controller (connect failure)")
    (f,) = compare(lab_plan, Observed(slurm=down)).findings
    assert f.line == ("ctl1: scontrol cannot get an answer from slurmctld (slurm_load_partitions: Unable to contact "
                      "slurm controller (connect failure)) — `systemctl status slurmctld` on ctl1; start it, or "
                      f"{UP}")


# --------------------------------------------------------------------------- kubernetes


def test_kubernetes_label_removed(lab_plan):
    def drop(nodes, _lists):
        del nodes["items"][1]["metadata"]["labels"]["topology.railyard.dev/su"]

    (f,) = compare(lab_plan, Observed(kubernetes=k8s_obs(drop))).findings
    assert f.line == ("kw1: label topology.railyard.dev/su is missing (the plan has 'su1') — "
                      f"`kubectl label node kw1 topology.railyard.dev/su=su1`, or {UP}")
    assert (f.layer, f.kind) == ("kubernetes", "label_missing")


def test_kubernetes_label_value_node_and_objects(lab_plan):
    def mutate(nodes, lists):
        nodes["items"][2]["metadata"]["labels"]["topology.railyard.dev/su"] = "su1"
        nodes["items"].append({"metadata": {"name": "kw9", "labels": {}}})
        for doc in lists:
            for item in doc["items"]:
                if item["kind"] == "ClusterQueue":
                    item["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "8"
        lists[:] = [d for d in lists if d["items"][0]["kind"] != "LocalQueue"]

    assert lines(compare(lab_plan, Observed(kubernetes=k8s_obs(mutate)))) == [
        (f"ClusterQueue/gpu: spec.resourceGroups[0].flavors[0].resources[2].nominalQuota is '8' in the cluster, "
        f"the plan has '4' — {UP} restores it"),
        f"LocalQueue/team-a/gpu is in the plan but not in the cluster — {UP} creates it",
        (f"kw2: label topology.railyard.dev/su is 'su1', the plan has 'su2' — "
        f"`kubectl label --overwrite node kw2 topology.railyard.dev/su=su2`, or {UP}"),
        "node kw9 is registered in Kubernetes but not in the spec — `kubectl delete node kw9`, or add it to the spec",
    ]


def test_kubernetes_capacity_of_a_kubelets_node(lab_plan):
    """The lab's workers run kubelets: the GPUs railyard sets must be the spec's 2, the CPUs
    and memory the kubelet measures at least the spec's 2 and 1000 MB (more is fine)."""
    def mutate(nodes, _lists):
        by_name = {n["metadata"]["name"]: n for n in nodes["items"]}
        del by_name["kw1"]["status"]["capacity"]["nvidia.com/gpu"]
        by_name["kw1"]["status"]["allocatable"]["memory"] = "1Mi"  # what the kubelet reserves: not drift
        by_name["kw2"]["status"]["capacity"].update({"cpu": "1", "memory": "999Mi", "nvidia.com/gpu": "3"})
        by_name["kw2"]["status"]["allocatable"]["nvidia.com/gpu"] = "0"

    assert compare(lab_plan, Observed(kubernetes=k8s_obs())).findings == ()
    found = compare(lab_plan, Observed(kubernetes=k8s_obs(mutate))).findings
    assert [(f.subject, f.kind, f.message) for f in found] == [
        ("kw1", "capacity_value", "kw1: capacity nvidia.com/gpu is missing, the plan has 2"),
        ("kw2", "capacity_short", "kw2 reports cpu 1, less than the spec's 2"),
        ("kw2", "capacity_short", "kw2 reports memory 999Mi, less than the spec's 1000Mi"),
        ("kw2", "capacity_value", "kw2: allocatable nvidia.com/gpu is 0, the plan has 2"),
        ("kw2", "capacity_value", "kw2: capacity nvidia.com/gpu is 3, the plan has 2"),
    ]
    assert found[0].fix == f"{UP} sets it"


def test_kubernetes_capacity_of_a_kwok_node_is_all_railyards():
    """A KWOK Node (a group with ``agent: kwok``) reports exactly what railyard registered:
    the dgx-h100 workers' 2 x 56 x 2 CPUs, 2,000,000 MB and 8 GPUs; more CPUs is drift too."""
    doc = yaml.safe_load((ROOT / "inventories/dgx-h100/cluster.yaml").read_text())
    next(g for g in doc["nodes"] if g["group"] == "dgx")["agent"] = "kwok"
    plan = loads_plan(yaml.safe_dump(doc), "dgx-h100-kwok.yaml")
    assert set(plan.kubernetes.agents.values()) == {"kwok"}
    want = {"cpu": "224", "memory": "2000000Mi", "pods": "110", "nvidia.com/gpu": "8"}
    nodes = {"items": [{"metadata": {"name": n, "labels": dict(plan.kubernetes.labels[n])},
                        "status": {"capacity": dict(want), "allocatable": dict(want)}} for n in plan.kubernetes.workers]}

    def capacity_findings():
        return [f for f in compare(plan, Observed(kubernetes=observation(nodes, []))).findings
                if f.kind.startswith("capacity")]

    assert capacity_findings() == []
    nodes["items"][0]["status"]["capacity"]["cpu"] = "256"
    found = capacity_findings()
    assert [(f.subject, f.kind, f.expected, f.observed) for f in found] == [
        ("dgx097", "capacity_value", "capacity.cpu=224", "capacity.cpu=256")]


@pytest.mark.parametrize(("text", "value"), [
    ("2", 2), ("1000Mi", 1000 * 2**20), ("1Gi", 1024 * 2**20), ("24683664Ki", 24683664 * 1024),
    ("500m", 0.5), ("1k", 1000), ("1.5G", 1_500_000_000), ("", None), ("Mi", None), ("two", None),
    ("NaN", None), ("Infinity", None), ("-InfMi", None),
])
def test_kubernetes_quantities_compare_by_value(text, value):
    assert quantity(text) == (None if value is None else Decimal(str(value)))


def test_kubernetes_not_deployed_is_a_note_not_drift(lab_plan):
    report = compare(lab_plan, Observed(kubernetes=KubernetesObservation(deployed=False, reason="no roles yet")))
    assert report.findings == ()
    assert report.notes == ("kubernetes: not checked: no roles yet",)
    assert report.exit_code == exitcodes.OK


def test_subset_diff_ignores_server_fields():
    want = {"spec": {"a": 1, "b": [{"x": "1"}]}}
    have = {"spec": {"a": "1", "b": [{"x": 1, "default": True}], "extra": 2}, "status": {}}
    assert subset_diff(want, have) == []
    assert subset_diff(want, {"spec": {"b": []}}) == [("spec.a", 1, None), ("spec.b", [{"x": "1"}], [])]


# --------------------------------------------------------------------------- all layers


def test_one_of_everything_sorted_by_layer_then_subject(lab_plan):
    observed = Observed(
        nodes=nodes_obs(gpu004={"exists": False, "power": "off", "reachable": False, "services": ()}),
        files=files_of(FileChange("gpu003", "slurm_compute", "t", "modified", "/etc/slurm/slurm.conf", 1, 1)),
        slurm=slurm_obs(nodes="drained_down", topology="extra_node_topology_changed"),
        kubernetes=k8s_obs(lambda n, _l: n["items"][1]["metadata"]["labels"].pop("railyard.dev/gpu")),
    )
    report = compare(lab_plan, observed)
    assert [(f.layer, f.subject, f.kind) for f in report.findings] == [
        ("nodes", "gpu004", "missing"),
        ("files", "gpu003", "file_changed"),
        ("slurm", "gpu002", "node_state"),
        ("slurm", "gpu003", "node_state"),
        ("slurm", "topology", "switch_nodes"),
        ("kubernetes", "kw1", "label_missing"),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_order_does_not_depend_on_observation_order(lab_plan, seed):
    import random

    obs = files_obs("drifted")
    shuffled = list(obs.changes)
    random.Random(seed).shuffle(shuffled)
    a = compare(lab_plan, Observed(files=obs))
    b = compare(lab_plan, Observed(files=replace(obs, changes=tuple(shuffled))))
    assert a == b and a.to_dict() == b.to_dict()


def test_a_release_other_than_the_specs_is_a_version_finding_other_failures_stay_errors(lab_plan):
    from railyard.drift.observed import TaskFailure

    moved = TaskFailure("gpu002", "slurm_compute", "Check the installed Slurm is the release the spec targets",
                        "slurm_compute: slurmd 23.02.7-1 on gpu002 is Slurm 23.02, but the spec targets Slurm 22.05")
    broken = TaskFailure("gpu003", "enroot", "Install enroot", "No package matching 'enroot' is available")
    obs = FilesObservation(hosts=("gpu002", "gpu003"), roles=("slurm_compute", "enroot"), failures=(moved, broken))
    report = compare(lab_plan, replace(clean_observed(), files=obs), stack="lab")
    (found,) = [f for f in report.findings if f.layer == "files"]
    assert (found.subject, found.kind, found.role) == ("gpu002", "version_changed", "slurm_compute")
    assert "is Slurm 23.02, but the spec targets Slurm 22.05" in found.message
    assert [e.subject for e in report.errors] == ["gpu003"]


def _version_check_task(role: str) -> str:
    """The name of *role*'s release check, as its tasks/install.yml has it."""
    from pathlib import Path

    import yaml

    tasks = yaml.safe_load((Path(__file__).resolve().parents[2] / f"roles/{role}/tasks/install.yml").read_text())
    (name,) = [t["name"] for t in tasks if t["name"].startswith("Check the installed")]
    return name


@pytest.mark.parametrize(("host", "role", "message"), [
    ("kcp1", "k8s_control_plane", ("k8s_control_plane: on kcp1 /usr/local/bin/kube-apiserver reports 'Kubernetes v1.36.0'"
                                  ": Kubernetes 1.36, but the spec targets Kubernetes 1.35")),
    ("kw2", "k8s_worker", ("k8s_worker: /usr/local/bin/kubelet on kw2 reports 'Kubernetes v1.36.0': Kubernetes 1.36, "
                          "but the spec targets Kubernetes 1.35")),
    ("kcp1", "kueue", "kueue: /usr/local/bin/kueue on kcp1 is Kueue 0.18.0, but the spec targets Kueue 0.17.1"),
    ("kcp1", "volcano", ("volcano: on kcp1 /usr/local/bin/vc-scheduler is Volcano 1.15.0, /usr/local/bin/"
                        "vc-controller-manager is Volcano 1.15.0, but the spec targets Volcano 1.14.1")),
])
def test_a_kubernetes_release_other_than_the_specs_is_a_version_finding(lab_plan, host, role, message):
    """Each Kubernetes role's release check (its real task name) that fails in the drift
    probe's check mode is version_changed on the host, like Slurm's; other failures stay errors."""
    from railyard.drift.observed import TaskFailure

    moved = TaskFailure(host, role, _version_check_task(role), message)
    broken = TaskFailure("kw1", "k8s_worker", "Copy the agent from the controller", "Could not find or access 'kwok'")
    obs = FilesObservation(hosts=(host, "kw1"), roles=(role, "k8s_worker"), failures=(moved, broken))
    report = compare(lab_plan, replace(clean_observed(), files=obs), stack="lab")
    (found,) = [f for f in report.findings if f.layer == "files"]
    assert (found.subject, found.kind, found.role) == (host, "version_changed", role)
    assert found.message == f"{host}: {message}"
    assert [e.subject for e in report.errors] == ["kw1"]

"""Collectors with a recorded runner: no containers, no controller; the wiring and the edges."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from railyard import exitcodes
from railyard.drift import applied, compare
from railyard.drift import collect as C
from railyard.drift.collect import (
    FilesRun,
    HostUnreachable,
    PlanRunner,
    Result,
    Timeouts,
    collect,
    collect_nodes,
    collect_slurm,
    expected_units,
    journal_argv,
    parse_systemctl_show,
    prepare_files,
    run_check_mode,
    secrets_from_deployment,
    systemctl_show_argv,
)
from railyard.drift.files import check_playbook, summarize_events
from railyard.drift.observed import Observed, UnitState, Unreachable
from railyard.drivers import NodeState
from railyard.load import load_plan, loads_plan
from tests.drift.recorded import FIX, slurm_obs, slurm_text

ALL_ROLES = ["munge", "slurm_controller", "slurm_compute", "nfs_client"]


class RecordedRunner:
    """Answers from a table of (host, argv) -> Result | Exception; records what was asked."""

    def __init__(self, answers: dict[tuple[str, tuple[str, ...]], Result | Exception],
                 default: Result | Exception | None = None) -> None:
        self.answers = answers
        self.default = default
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        key = (host, tuple(argv))
        self.calls.append(key)
        answer = self.answers.get(key, self.default)
        if answer is None:
            raise AssertionError(f"unexpected command on {host}: {argv}")
        if isinstance(answer, Exception):
            raise answer
        return answer


def scontrol(case_topology="clean", case_nodes="clean", case_partitions="clean", host="ctl1"):
    return {
        (host, ("scontrol", "show", "topology")): Result(0, slurm_text(case_topology, "show_topology"), ""),
        (host, ("scontrol", "show", "node")): Result(0, slurm_text(case_nodes, "show_node"), ""),
        (host, ("scontrol", "show", "partition")): Result(0, slurm_text(case_partitions, "show_partition"), ""),
    }


# --------------------------------------------------------------------------- slurm


def test_slurm_from_the_controller(lab_plan):
    obs = collect_slurm(lab_plan, RecordedRunner(scontrol()))
    assert obs == slurm_obs()
    assert compare(lab_plan, Observed(slurm=obs)).exit_code == exitcodes.OK


def test_slurm_without_topology_plugin(lab_plan):
    answers = scontrol()
    stderr = slurm_text("no_topology", "show_topology_stderr")
    answers[("ctl1", ("scontrol", "show", "topology"))] = Result(0, "", stderr)
    obs = collect_slurm(lab_plan, RecordedRunner(answers))
    assert obs.switches == () and obs.failure == ""


def test_slurm_controller_unreachable(lab_plan):
    obs = collect_slurm(lab_plan, RecordedRunner({}, default=HostUnreachable("no such container")))
    assert obs.unreachable is not None
    assert (obs.controller, obs.unreachable.reason) == ("ctl1", "no such container")


def test_slurmctld_down_and_scontrol_missing(lab_plan):
    answers = scontrol()
    answers[("ctl1", ("scontrol", "show", "node"))] = Result(
        1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)\n")
    obs = collect_slurm(lab_plan, RecordedRunner(answers))
    assert obs.failure == "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    missing = collect_slurm(lab_plan, RecordedRunner({}, default=Result(127, "", "exec: scontrol: not found")))
    assert missing.failure == "scontrol is not installed on ctl1"


# --------------------------------------------------------------------------- kubernetes


ETCD_CLEAN = Result(0, (FIX / "kubernetes" / "etcd_clean.json").read_text(), "")  # a real etcd's one member, kcp1
RUNTIME = "containerd://1.7.24~ds1"


DNS_ARGV = ("kcp1", (*C.KUBECTL, "-n", "kube-system", "get", "deployment", "coredns", "--ignore-not-found", "-o", "json"))


def coredns(replicas: int, available: int | None) -> Result:
    """kube-system/coredns as kubectl prints it (the fields drift reads)."""
    status = {"replicas": replicas} | ({"availableReplicas": available} if available is not None else {})
    doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system"},
           "spec": {"replicas": replicas}, "status": status}
    return Result(0, json.dumps(doc), "")


def kubectl_answers(plan, labels=None, etcd: Result | Exception = ETCD_CLEAN, dns: Result | None = None,
                    host: str = "kcp1") -> dict:
    """What *host*'s kubectl and etcd return for a cluster that is exactly the plan."""
    from railyard.drift.kubernetes import kinds_of

    k = plan.kubernetes
    nodes = {"items": [{"metadata": {"name": n, "labels": dict((labels or k.labels)[n])},
                        "status": {"capacity": dict(k.capacity[n]), "allocatable": dict(k.capacity[n]),
                                   "nodeInfo": {"kubeletVersion": "v1.35.4", "containerRuntimeVersion": RUNTIME}}}
                       for n in k.workers]}
    objects = {"apiVersion": "v1", "kind": "List", "items": [*k.kueue, *k.volcano]}
    get = (host, (*C.KUBECTL, "get"))
    return {(get[0], (*get[1], "nodes", "-o", "json")): Result(0, json.dumps(nodes), ""),
            (get[0], (*get[1], ",".join(kinds_of(objects["items"])), "-A", "-o", "json")):
                Result(0, json.dumps(objects), ""),
            (host, tuple(C.etcd_probe())): etcd,
            (host, DNS_ARGV[1]): dns or coredns(2, 2)}


@pytest.mark.parametrize(("answer", "kind", "message"), [
    (coredns(2, None), "dns_unavailable",
     "kube-system/coredns: 0 of 2 replicas available: the cluster DNS at 10.96.0.10 does not answer"),
    (Result(0, "", ""), "dns_missing",  # --ignore-not-found prints nothing
     "kube-system/coredns: the cluster DNS Deployment is not there (nothing answers at 10.96.0.10)"),
])
def test_the_cluster_dns_not_running_is_drift(lab_plan, tmp_path, answer, kind, message):
    """The lab's kube-dns address: the default Service range's tenth (a literal)."""
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan, dns=answer)), root=tmp_path)
    [finding] = compare(lab_plan, Observed(kubernetes=obs)).findings
    assert (finding.subject, finding.kind, finding.message) == ("kube-system/coredns", kind, message)


def test_a_cluster_dns_short_of_replicas_is_a_note_while_it_answers(lab_plan, tmp_path):
    applied.save(applied.record_path(tmp_path, "lab"), {"kw1": RUNTIME, "kw2": RUNTIME})
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan, dns=coredns(2, 1))), root=tmp_path)
    report = compare(lab_plan, Observed(kubernetes=obs))
    assert report.findings == ()
    assert report.notes == (("kubernetes: kube-system/coredns has 1 of 2 replicas available (the cluster DNS at "
                             "10.96.0.10 answers, with less to spare)"),)


def test_an_unreadable_dns_answer_is_a_check_error_not_a_crash(lab_plan, tmp_path):
    with pytest.raises(RuntimeError, match="coredns --ignore-not-found -o json` on kcp1: not a Deployment"):
        C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan, dns=Result(0, '{"kind": "Pod"}', ""))),
                             root=tmp_path)


def test_kubernetes_from_the_control_plane(lab_plan, tmp_path):
    applied.save(applied.record_path(tmp_path, "lab"), {"kw1": RUNTIME, "kw2": RUNTIME})
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan)), root=tmp_path)
    assert obs.deployed and sorted(obs.labels) == ["kw1", "kw2"]
    assert [m.name for m in obs.etcd.members] == ["kcp1"]
    assert obs.applied_runtimes == {"kw1": RUNTIME, "kw2": RUNTIME}
    report = compare(lab_plan, Observed(kubernetes=obs))
    assert (report.findings, report.errors, report.notes) == ((), (), ())
    moved = {n: dict(v) for n, v in lab_plan.kubernetes.labels.items()}
    su = next(key for key in moved["kw1"] if key.endswith("/su"))
    moved["kw1"][su] = "su9"
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan, moved)), root=tmp_path)
    [finding] = compare(lab_plan, Observed(kubernetes=obs)).findings
    assert (finding.subject, finding.kind) == ("kw1", "label_value") and "su9" in finding.message


def test_kubernetes_without_a_record_of_the_last_up_notes_it(lab_plan, tmp_path):
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan)), root=tmp_path)
    report = compare(lab_plan, Observed(kubernetes=obs))
    assert report.findings == () and report.exit_code == exitcodes.OK
    assert report.notes == (
        ("kubernetes: container runtime versions not compared: no record of the last `railyard up` on this "
        f"machine ({tmp_path}/.railyard/drift/lab.applied.json); `railyard up` writes it"),)


@pytest.mark.parametrize(("answer", "kind", "text"), [
    (Result(0, (FIX / "kubernetes" / "etcd_refused.json").read_text(), ""), "finding",
     "kcp1: etcd does not answer on https://127.0.0.1:"),
    (Result(127, "", "sh: 1: python3: not found\n"), "error",
     "kcp1: etcd's members not checked: the etcd probe exited 127: sh: 1: python3: not found"),
    (Result(0, "Traceback (most recent call last):\n", ""), "error",
     "kcp1: etcd's members not checked: the etcd probe printed no JSON: 'Traceback (most recent call last):'"),
    (Result(0, "[]", ""), "error", "kcp1: etcd's members not checked: the etcd probe printed list, not an object"),
])
def test_etcd_that_does_not_answer_or_cannot_be_read(lab_plan, tmp_path, answer, kind, text):
    """etcd not answering is drift (the plan has it running); a probe whose output cannot
    be read leaves the check incomplete (exit 1), named; neither stops the rest."""
    obs = C.collect_kubernetes(lab_plan, RecordedRunner(kubectl_answers(lab_plan, etcd=answer)), root=tmp_path)
    report = compare(lab_plan, Observed(kubernetes=obs))
    if kind == "finding":
        [f] = report.findings
        assert f.kind == "etcd_down" and f.message.startswith(text) and "Connection refused" in f.message
        assert report.exit_code == exitcodes.DRIFT
    else:
        assert report.findings == ()
        assert [e.message for e in report.errors] == [text]
        assert report.exit_code == exitcodes.ERROR


def test_apiserver_down_says_what_etcd_said(lab_plan):
    down = kubectl_answers(lab_plan, etcd=Result(0, (FIX / "kubernetes" / "etcd_refused.json").read_text(), ""))
    runner = RecordedRunner({k: v for k, v in down.items() if "python3" in k[1]},
                            default=Result(1, "", "The connection to the server 127.0.0.1:6443 was refused\n"))
    with pytest.raises(RuntimeError, match="was refused; etcd there: .*Connection refused"):
        C.collect_kubernetes(lab_plan, runner)


def test_kubectl_output_that_is_not_json_is_a_named_error(lab_plan):
    answers = kubectl_answers(lab_plan)
    answers[("kcp1", (*C.KUBECTL, "get", "nodes", "-o", "json"))] = Result(0, "<html>proxy error</html>", "")
    with pytest.raises(RuntimeError, match="get nodes -o json` on kcp1 printed no JSON: '<html>proxy error</html>'"):
        C.collect_kubernetes(lab_plan, RecordedRunner(answers))


def test_railyard_up_records_each_workers_runtime(lab_plan, tmp_path):
    """What `railyard up` leaves for the next drift check: each worker's runtime as its
    Node reports it; a worker that does not report now keeps its earlier record."""
    path = applied.record_path(tmp_path, "lab")
    msg = C.record_applied(lab_plan, RecordedRunner(kubectl_answers(lab_plan)), root=tmp_path)
    assert msg == f"recorded the container runtime of 2 worker(s) in {path}: {RUNTIME}"
    assert applied.load(path) == {"kw1": RUNTIME, "kw2": RUNTIME}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    nodes = {"items": [{"metadata": {"name": "kw1"},
                        "status": {"nodeInfo": {"containerRuntimeVersion": "containerd://2.1.4"}}},
                       {"metadata": {"name": "kw2"}, "status": {}},
                       {"metadata": {"name": "kcp1"}, "status": {"nodeInfo": {"containerRuntimeVersion": "x"}}}]}
    get = ("kcp1", (*C.KUBECTL, "get", "nodes", "-o", "json"))
    C.record_applied(lab_plan, RecordedRunner({get: Result(0, json.dumps(nodes), "")}), root=tmp_path)
    assert applied.load(path) == {"kw1": "containerd://2.1.4", "kw2": RUNTIME}
    for broken in (HostUnreachable("no answer within 30s"), Result(0, "not json", ""), Result(1, "", "refused")):
        msg = C.record_applied(lab_plan, RecordedRunner({get: broken}), root=tmp_path)
        assert msg.startswith("container runtimes not recorded: "), msg
    assert applied.load(path) == {"kw1": "containerd://2.1.4", "kw2": RUNTIME}


class Down:
    """*down* hosts do not answer (HostUnreachable with their reason); the others answer from *answers*."""

    def __init__(self, down: dict[str, str], answers: dict) -> None:
        self.down = down
        self.recorded = RecordedRunner(answers)
        self.hosts: list[str] = []

    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        self.hosts.append(host)
        if host in self.down:
            raise HostUnreachable(self.down[host])
        return self.recorded.run(host, argv, timeout)


@pytest.fixture(scope="module")
def ha_plan():
    """dgx-h100: three control-plane nodes, kcp[1-3] (the HA control plane)."""
    from tests.conftest import ROOT

    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    assert plan.kubernetes.control_plane == ("kcp1", "kcp2", "kcp3")
    return plan


def test_kubernetes_is_read_through_the_first_control_plane_node_that_answers(ha_plan, tmp_path):
    """kcp1 down is not the cluster down: kcp2 answers for it (and kcp3 is not asked);
    the observation says who answered, and the report says so in a note. That kcp1
    does not answer is the nodes layer's finding, not repeated here."""
    runner = Down({"kcp1": "no answer within 30s"}, kubectl_answers(ha_plan, host="kcp2"))
    obs = C.collect_kubernetes(ha_plan, runner, root=tmp_path)
    assert (obs.host, obs.unanswered) == ("kcp2", (Unreachable("kcp1", "no answer within 30s"),))
    assert obs.etcd.host == "kcp2" and sorted(obs.labels) == sorted(ha_plan.kubernetes.workers)
    assert "kcp3" not in runner.hosts and set(runner.hosts) == {"kcp1", "kcp2"}
    report = compare(ha_plan, Observed(kubernetes=obs))
    assert [f.kind for f in report.findings if not f.kind.startswith("etcd_member")] == []
    assert ("kubernetes: read through kcp2: control-plane node kcp1 (no answer within 30s) did not answer"
            in report.notes)
    both = C.collect_kubernetes(ha_plan, Down({"kcp1": "gone", "kcp2": "also gone"},
                                              kubectl_answers(ha_plan, host="kcp3")), root=tmp_path)
    assert ("kubernetes: read through kcp3: control-plane nodes kcp1 (gone), kcp2 (also gone) did not answer"
            in compare(ha_plan, Observed(kubernetes=both)).notes)
    first = C.collect_kubernetes(ha_plan, Down({}, kubectl_answers(ha_plan, host="kcp1")), root=tmp_path)
    assert (first.host, first.unanswered) == ("kcp1", ())
    assert not any("read through" in n for n in compare(ha_plan, Observed(kubernetes=first)).notes)


def test_no_control_plane_node_answers_is_a_check_error_naming_each(ha_plan, tmp_path):
    down = {"kcp1": "no answer within 30s", "kcp2": "ssh: connect to host 10.0.0.12 port 22: Connection refused",
            "kcp3": "no such container"}
    with pytest.raises(HostUnreachable) as exc:
        C.collect_kubernetes(ha_plan, Down(down, {}), root=tmp_path)
    assert str(exc.value) == ("no control-plane node answers (kcp1: no answer within 30s; kcp2: ssh: connect to "
                              "host 10.0.0.12 port 22: Connection refused; kcp3: no such container)")
    obs = collect(ha_plan, ["kubernetes"], Down(down, {}), root=tmp_path)
    assert [e.message for e in obs.errors] == [f"kubernetes: {exc.value}"]


def test_railyard_up_records_runtimes_through_the_first_control_plane_node_that_answers(ha_plan, tmp_path):
    worker = ha_plan.kubernetes.workers[0]
    nodes = {"items": [{"metadata": {"name": worker}, "status": {"nodeInfo": {"containerRuntimeVersion": RUNTIME}}}]}
    get = (*C.KUBECTL, "get", "nodes", "-o", "json")
    msg = C.record_applied(ha_plan, Down({"kcp1": "gone"}, {("kcp2", get): Result(0, json.dumps(nodes), "")}),
                           root=tmp_path)
    assert msg.startswith("recorded the container runtime of 1 worker(s)"), msg
    msg = C.record_applied(ha_plan, Down({"kcp1": "gone", "kcp2": "gone too", "kcp3": "not there"}, {}),
                           root=tmp_path)
    assert msg == ("container runtimes not recorded: no control-plane node answers (kcp1: gone; kcp2: gone too; "
                   "kcp3: not there)")


def test_kubernetes_not_deployed_and_apiserver_down(lab_plan):
    missing = RecordedRunner({}, default=Result(127, "", "exec: kubectl: not found"))
    obs = C.collect_kubernetes(lab_plan, missing)
    assert not obs.deployed and "k8s_control_plane" in obs.reason
    down = RecordedRunner({}, default=Result(1, "", "The connection to the server 127.0.0.1:6443 was refused\n"))
    with pytest.raises(RuntimeError, match="connection to the server 127.0.0.1:6443 was refused"):
        C.collect_kubernetes(lab_plan, down)


# --------------------------------------------------------------------------- nodes


def test_expected_units_follow_the_roles_that_exist(lab_plan):
    units = expected_units(lab_plan, ALL_ROLES)
    munge = ("munge.service", "active", "munge")
    mount = ("shared.mount", "enabled", "nfs_client"), ("home.mount", "enabled", "nfs_client")
    sshd = ("ssh.service", "active", "slurm_compute")  # pam_slurm_adopt's sshd
    assert units["gpu001"] == (munge, ("slurmd.service", "active", "slurm_compute"), sshd, *mount)
    assert units["ctl1"] == (munge, ("slurmctld.service", "active", "slurm_controller"), *mount)
    assert units["login1"] == (munge, *mount)
    assert units["kw1"] == mount
    k8s = expected_units(lab_plan, [*ALL_ROLES, "k8s_control_plane", "k8s_worker", "kueue", "volcano"])
    assert [u[0] for u in k8s["kcp1"]] == ["etcd.service", "kube-apiserver.service", "kube-controller-manager.service",
                                          "kube-scheduler.service", "kueue.service", "vc-scheduler.service",
                                          "vc-controller-manager.service", "shared.mount", "home.mount"]
    assert k8s["kcp1"][5] == ("vc-scheduler.service", "active", "volcano")
    assert k8s["kw2"] == (("haproxy.service", "active", "k8s_worker"), ("containerd.service", "active", "k8s_worker"),
                          ("railyard-pod-network.service", "active", "k8s_worker"),
                          ("kubelet.service", "active", "k8s_worker"), ("kube-proxy.service", "active", "k8s_worker"),
                          *mount)  # the lab's workers run real kubelets
    assert "nfs1" not in units  # the server does not mount its own export
    assert expected_units(lab_plan, []) == {}
    assert expected_units(lab_plan, ["slurm_compute"]) == {
        f"gpu00{i}": (("slurmd.service", "active", "slurm_compute"), sshd) for i in range(1, 5)}


@pytest.mark.parametrize(("delivery", "login"), [
    (None, (("sackd.service", "active", "slurm_login"),)),  # the lab (24.11) defaults to configless
    ("configless", (("sackd.service", "active", "slurm_login"),)),
    ("files", None),  # no daemon on a files-mode login node
])
def test_expected_units_sackd_on_login_nodes_in_configless_mode(lab, delivery, login):
    if delivery is not None:
        lab["partitions"]["slurm"]["config_delivery"] = delivery
    plan = loads_plan(yaml.safe_dump(lab), "t.yaml")
    units = expected_units(plan, ["slurm_login", "slurm_compute"])
    assert units.get("login1") == login
    assert units["gpu001"] == (("slurmd.service", "active", "slurm_compute"),
                               ("ssh.service", "active", "slurm_compute"))  # in both modes


def _with_agent(doc: dict, agent: str) -> None:
    """Every group that holds a Kubernetes worker runs *agent* (the spec's per-group
    ``agent``; the default is a real kubelet)."""
    plan = loads_plan(yaml.safe_dump(doc), "t.yaml")
    for gi in {plan.node(w).group_index for w in (plan.kubernetes.workers if plan.kubernetes else ())}:
        doc["nodes"][gi]["agent"] = agent


LAB_MOUNTS = (("shared.mount", "enabled", "nfs_client"), ("home.mount", "enabled", "nfs_client"))
LAB_UNITS = {  # the lab, every role that keeps a unit, configless, real kubelets: written out
    "ctl1": (("munge.service", "active", "munge"), ("slurmdbd.service", "active", "slurmdbd"),
             ("mariadb.service", "active", "slurmdbd"), ("slurmctld.service", "active", "slurm_controller"), *LAB_MOUNTS),
    "login1": (("munge.service", "active", "munge"), ("sackd.service", "active", "slurm_login"), *LAB_MOUNTS),
    **{f"gpu00{i}": (("munge.service", "active", "munge"), ("slurmd.service", "active", "slurm_compute"),
                     ("ssh.service", "active", "slurm_compute"), *LAB_MOUNTS) for i in range(1, 5)},
    "kcp1": (("etcd.service", "active", "k8s_control_plane"), ("kube-apiserver.service", "active", "k8s_control_plane"),
             ("kube-controller-manager.service", "active", "k8s_control_plane"),
             ("kube-scheduler.service", "active", "k8s_control_plane"), ("kueue.service", "active", "kueue"),
             ("vc-scheduler.service", "active", "volcano"), ("vc-controller-manager.service", "active", "volcano"),
             *LAB_MOUNTS),
    **{f"kw{i}": (("haproxy.service", "active", "k8s_worker"), ("containerd.service", "active", "k8s_worker"),
                  ("railyard-pod-network.service", "active", "k8s_worker"),
                  ("kubelet.service", "active", "k8s_worker"), ("kube-proxy.service", "active", "k8s_worker"),
                  *LAB_MOUNTS) for i in (1, 2)},
}


@pytest.mark.parametrize(("delivery", "agent"), [
    ("configless", "kubelet"), ("files", "kubelet"), ("configless", "kwok"), ("files", "kwok")])
def test_expected_units_of_the_lab_written_out(lab, delivery, agent):
    _with_agent(lab, agent)
    lab["partitions"]["slurm"]["config_delivery"] = delivery
    plan = loads_plan(yaml.safe_dump(lab), "t.yaml")
    want = dict(LAB_UNITS)
    if delivery == "files":  # no daemon on a files-mode login node
        want["login1"] = (("munge.service", "active", "munge"), *LAB_MOUNTS)
    if agent == "kwok":
        want |= {f"kw{i}": (("haproxy.service", "active", "k8s_worker"), ("kwok.service", "active", "k8s_worker"),
                            *LAB_MOUNTS) for i in (1, 2)}
    assert expected_units(plan, C.unit_roles()) == want


@pytest.mark.parametrize("case", sorted(json.loads((FIX / "nodes" / "expected_units.json").read_text())))
def test_expected_units_of_the_example_specs_as_recorded(case):
    """fixtures/nodes/expected_units.json: every inventories/*/cluster.yaml in both config
    deliveries and with both worker agents, as expected_units gave them when its unit names
    were still written in Python (hosts folded where their units are the same)."""
    from railyard.hostlist import expand
    from tests.conftest import ROOT

    name, delivery, agent = case.split("/")
    doc = yaml.safe_load((ROOT / "inventories" / name / "cluster.yaml").read_text())
    doc["partitions"]["slurm"]["config_delivery"] = delivery
    _with_agent(doc, agent)
    plan = loads_plan(yaml.safe_dump(doc), "t.yaml")
    recorded = json.loads((FIX / "nodes" / "expected_units.json").read_text())[case]
    want = {h: tuple(map(tuple, units)) for hosts, units in recorded.items() for h in expand(hosts)}
    assert expected_units(plan, C.unit_roles()) == want


def test_expected_units_fixture_covers_every_example():
    from tests.conftest import EXAMPLES

    cases = json.loads((FIX / "nodes" / "expected_units.json").read_text())
    assert sorted(cases) == sorted(f"{p.parent.name}/{d}/{a}" for p in EXAMPLES
                                   for d in ("configless", "files") for a in ("kubelet", "kwok"))


# Where a role uses a name: what runs (tasks, handlers, templates) and the variables it computes
# from (vars). Not defaults/ (a variable defined and never used) nor meta/ (the manifest itself).
ROLE_USES = ("tasks", "handlers", "templates", "vars")


def _unnamed_in_role(root: Path, role: str) -> list[str]:
    """The names in the role's ``units`` (a unit, the variable that holds one, a variable a
    condition reads) that none of the role's own files mention, by whole word."""
    import re

    from railyard.apply import roles

    text = "\n".join(f"{f.name}\n{f.read_text()}" for d in ROLE_USES for f in sorted((root / "roles" / role / d).rglob("*"))
                     if f.is_file())
    names = []
    for e in roles.facts(root, role).get("units") or []:
        names += e["unit"] if isinstance(e.get("unit"), list) else [e["unit"]] if "unit" in e else []
        names += [e["var"].split(".")[0]] if "var" in e else []
        names += [v.split(".")[0] for v in e.get("when") or {}]
    return [n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]


def test_each_unit_a_role_names_is_one_its_files_use():
    from tests.conftest import ROOT

    with_units = C.unit_roles(ROOT)
    assert set(with_units) >= {"munge", "slurm_controller", "slurm_compute", "slurm_login", "nfs_client",
                               "k8s_control_plane", "k8s_worker", "kueue", "volcano"}
    assert {role: _unnamed_in_role(ROOT, role) for role in with_units} == {role: [] for role in with_units}


def test_a_unit_its_role_never_mentions_is_caught(tmp_path):
    role = tmp_path / "roles" / "r"
    for d, text in {"tasks/main.yml": "- ansible.builtin.systemd_service: {name: '{{ r_service }}'}\n",
                    "defaults/main.yml": "r_service: rd\nr_unused: other\n",
                    "meta/railyard.yml": "units:\n  - {var: r_service, want: active}\n  - {var: r_unused, want: active}\n"
                                         "  - {unit: ghost, want: active, when: {r_mode: x}}\n"}.items():
        (role / d).parent.mkdir(parents=True, exist_ok=True)
        (role / d).write_text(text)
    assert _unnamed_in_role(tmp_path, "r") == ["r_unused", "ghost", "r_mode"]


def test_role_units_schema(tmp_path):
    from railyard.apply import roles

    role = tmp_path / "roles" / "r"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "defaults" / "main.yml").write_text(
        "r_mode: \"{{ railyard_r_mode | default('b') }}\"\nr_units: [{name: one}, {name: two}]\n"
        "r_bad: \"{{ a if b else c }}\"\n")

    def units(doc, extravars=None, inventory=None):
        (role / "meta" / "railyard.yml").write_text(yaml.safe_dump({"units": doc}))
        roles._load.cache_clear()
        return roles.units(tmp_path, "r", extravars or {}, inventory or {})

    assert units([{"unit": ["a", "b.mount"], "want": "active"}]) == (("a.service", "active"), ("b.mount", "active"))
    assert units([{"var": "r_units", "want": "enabled"}]) == (("one.service", "enabled"), ("two.service", "enabled"))
    when = [{"unit": "x", "want": "active", "when": {"r_mode": "a"}}]
    assert units(when) == ()  # r_mode follows railyard_r_mode, unset: 'b'
    assert units(when, inventory={"railyard_r_mode": "a"}) == (("x.service", "active"),)
    assert units(when, extravars={"r_mode": "a"}, inventory={"railyard_r_mode": "b"}) == (("x.service", "active"),)
    assert units([{"var": "m.nfs", "want": "enabled"}], inventory={"m": {"nfs": ["s.mount"]}}) == (
        ("s.mount", "enabled"),)
    for bad, message in [([{"unit": "a"}], "want must be"), ([{"unit": "a", "var": "b", "want": "active"}], "one of them"),
                         ([{"name": "a", "want": "active"}], "needs unit or var"),
                         ([{"var": "r_bad", "want": "active"}], "cannot read without Ansible")]:
        with pytest.raises(ValueError, match=message):
            units(bad)
    with pytest.raises(KeyError, match="r_nothing is set nowhere"):
        units([{"var": "r_nothing", "want": "active"}])


WANTED = (("munge.service", "active"), ("slurmd.service", "active"), ("shared.mount", "enabled"))


def test_systemctl_show_recorded_on_a_live_node():
    clean = parse_systemctl_show(WANTED, (FIX / "live" / "systemctl_show.clean.txt").read_text())
    assert clean == (
        UnitState("munge.service", "active", "active", "running", "enabled", "loaded"),
        UnitState("slurmd.service", "active", "active", "running", "enabled", "loaded"),
        UnitState("shared.mount", "enabled", "inactive", "dead", "enabled", "loaded"),
    )
    stopped = parse_systemctl_show(WANTED, (FIX / "live" / "systemctl_show.slurmd_stopped.txt").read_text())
    assert stopped[1] == UnitState("slurmd.service", "active", "inactive", "dead", "enabled", "loaded")
    removed = parse_systemctl_show(WANTED, (FIX / "live" / "systemctl_show.mount_removed.txt").read_text())
    assert removed[2] == UnitState("shared.mount", "enabled", "inactive", "dead", "", "not-found")
    assert parse_systemctl_show([("x.service", "active")], "") == (UnitState("x.service", "active", load="not-found"),)


class FakeDriver:
    def __init__(self, states: dict[str, NodeState]) -> None:
        self.states = states

    def observe(self, node):
        return self.states.get(node.name, NodeState(exists=True, power="on", reachable=True, detail="running"))


def _roles_root(tmp_path: Path, roles: Sequence[str]) -> Path:
    """Roles that exist but do nothing, with the real roles' facts (defaults, vars, meta/railyard.yml)."""
    from tests.conftest import ROOT

    for role in roles:
        (tmp_path / "roles" / role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / role / "tasks" / "main.yml").write_text("---\n[]\n")
        for facts in ("defaults/main.yml", "vars/main.yml", "meta/railyard.yml"):
            if (ROOT / "roles" / role / facts).is_file():
                (tmp_path / "roles" / role / facts).parent.mkdir(exist_ok=True)
                (tmp_path / "roles" / role / facts).write_text((ROOT / "roles" / role / facts).read_text())
    return tmp_path


def test_nodes_driver_state_and_units(lab_plan, tmp_path, monkeypatch):
    states = {"gpu004": NodeState(exists=False, power="off", detail="no such container")}
    monkeypatch.setattr("railyard.drivers.driver_for", lambda spec: FakeDriver(states))
    # the lab's compute nodes keep slurmd, and sshd for pam_slurm_adopt
    show = systemctl_show_argv(["slurmd.service", "ssh.service"])
    sshd = "Id=ssh.service\nLoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
    running = Result(0, "Id=slurmd.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
                        "UnitFileState=enabled\n\n" + sshd, "")
    stopped = Result(0, (FIX / "live" / "systemctl_show.slurmd_stopped.txt").read_text().rstrip("\n") + "\n\n"
                     + sshd, "")
    journal = Result(0, "slurmd-gpu003: error: Unable to register: Zero Bytes were transmitted or received\n"
                        "slurmd.service: Main process exited, code=exited, status=1/FAILURE\n", "")
    runner = RecordedRunner({("gpu003", tuple(show)): stopped,
                             ("gpu003", tuple(journal_argv("slurmd.service"))): journal}, default=running)
    obs = collect_nodes(lab_plan, runner, root=_roles_root(tmp_path, ["slurm_compute"]))
    by = {n.name: n for n in obs.nodes}
    assert [n.name for n in obs.nodes] == [n.name for n in lab_plan.nodes]
    assert (by["gpu004"].exists, by["gpu004"].services) == (False, ())
    assert by["gpu003"].services == (
        UnitState("slurmd.service", "active", "inactive", "dead", "enabled", "loaded", "slurm_compute",
                  "slurmd-gpu003: error: Unable to register: Zero Bytes were transmitted or received | "
                  "slurmd.service: Main process exited, code=exited, status=1/FAILURE"),
        UnitState("ssh.service", "active", "active", "running", "enabled", "loaded", "slurm_compute", ""),)
    assert by["ctl1"].services == ()  # no units expected there with only slurm_compute
    assert by["gpu001"].handle == "railyard-lab-gpu001"
    assert ("gpu001", ("systemctl", "show", "-p", "Id,LoadState,ActiveState,SubState,UnitFileState",
                       "slurmd.service", "ssh.service")) in runner.calls
    report = compare(lab_plan, Observed(nodes=obs))
    assert [f.message for f in report.findings] == [
        ("gpu003: slurmd.service is inactive (dead), the plan has it running; its journal ends: "
        "slurmd-gpu003: error: Unable to register: Zero Bytes were transmitted or received | "
        "slurmd.service: Main process exited, code=exited, status=1/FAILURE"),
        "gpu004: container railyard-lab-gpu004 does not exist",
    ]


def test_nodes_exec_failing_means_unreachable(lab_plan, tmp_path, monkeypatch):
    monkeypatch.setattr("railyard.drivers.driver_for", lambda spec: FakeDriver({}))
    runner = RecordedRunner({}, default=HostUnreachable("no answer within 30s"))
    obs = collect_nodes(lab_plan, runner, root=_roles_root(tmp_path, ["munge"]))
    gpu = next(n for n in obs.nodes if n.name == "gpu001")
    assert (gpu.reachable, gpu.detail) == (False, "no answer within 30s")
    assert compare(lab_plan, Observed(nodes=obs)).unreachable == ("ctl1", "gpu001", "gpu002", "gpu003", "gpu004",
                                                                  "login1")


# --------------------------------------------------------------------------- runner


def test_plan_runner_podman_exec(lab_plan, monkeypatch):
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        if cmd[2] == "railyard-lab-gpu004":
            return subprocess.CompletedProcess(cmd, 125, "", 'Error: no container with name or ID '
                                               '"railyard-lab-gpu004" found: no such container\n')
        if cmd[2] == "railyard-lab-gpu003":
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return subprocess.CompletedProcess(cmd, 3, "inactive\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    runner = PlanRunner(lab_plan)
    assert runner.run("gpu001", ["systemctl", "is-active", "x"], 5) == Result(3, "inactive\n", "")
    assert seen[0] == ["podman", "exec", "railyard-lab-gpu001", "systemctl", "is-active", "x"]
    with pytest.raises(HostUnreachable, match="no such container"):
        runner.run("gpu004", ["true"], 5)
    with pytest.raises(HostUnreachable, match="no answer within 5s"):
        runner.run("gpu003", ["true"], 5)
    with pytest.raises(HostUnreachable, match="not in the spec"):
        runner.run("gpu999", ["true"], 5)


# --------------------------------------------------------------------------- files


def test_prepare_files_plans_what_pulumi_plans(lab_plan, tmp_path):
    root = _roles_root(tmp_path, ["common", "munge", "slurm_compute", "enroot"])
    run = prepare_files(lab_plan, root, secrets={})
    assert run.roles == ("common", "enroot", "slurm_compute")  # STEPS order; munge needs its key
    plays = json.loads(run.playbook)  # one check-mode playbook, one play per role
    assert [p["roles"] for p in plays] == [[role] for role in run.roles]
    assert plays[0] == {"name": "railyard: common", "hosts": "all", "gather_facts": False,
                        "strategy": "mitogen_free", "roles": ["common"], "ignore_errors": True}
    from railyard.apply.playbooks import STEPS

    (munge_var,) = [var for step in STEPS if step.role == "munge" for var, _name in step.secrets]
    assert munge_var not in run.extravars
    assert run.extravars["enroot_package_required"] is False  # the lab: ROLE_VARS as Pulumi passes them
    assert Path(run.inventory).is_file() and run.inventory.endswith("/ansible/inventory.json")
    assert any(n.startswith("role munge not checked: it needs the munge secret") for n in run.notes)
    assert any(n.startswith("role nfs_server skipped:") for n in run.notes)
    with_key = prepare_files(lab_plan, root, secrets={"munge": "a2V5"})
    assert "munge" in with_key.roles and with_key.extravars[munge_var] == "a2V5"  # as Pulumi passes it


def test_check_mode_for_real_on_localhost(tmp_path):
    """One real ansible-runner run (local connection, no container): the whole files path."""
    strategies = Path(C.ROOT) / "plugins" / "strategy"  # mitogen_free, as the repo's ansible.cfg has it
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\nhost_key_checking = False\nstrategy_plugins = {strategies}\n")
    role = tmp_path / "roles" / "demo" / "tasks"
    role.mkdir(parents=True)
    target = tmp_path / "target.conf"
    target.write_text("a=1\nb=2\n")
    role.joinpath("main.yml").write_text(
        f"---\n- name: Install target.conf as rendered\n  ansible.builtin.copy:\n"
        f"    content: \"a=1\\nb=3\\n\"\n    dest: {target}\n    mode: '0644'\n")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu001": {
        "ansible_connection": "local", "ansible_python_interpreter": str(Path(__import__("sys").executable))}}}}))
    run = FilesRun(check_playbook([("demo", "all")]), str(inventory), {}, ("gpu001",), ("demo",))
    events, (status, rc, _tail) = run_check_mode(run, tmp_path, Timeouts(files=120))
    assert (status, rc) == ("successful", 0)
    s = summarize_events(events)
    assert [(c.host, c.role, c.change, c.path, c.expected, c.observed) for c in s.changes] == [
        ("gpu001", "demo", "modified", str(target), ("b=3",), ("b=2",))]
    assert target.read_text() == "a=1\nb=2\n"  # check mode changed nothing


def _scripted_check_runs(monkeypatch, results):
    """collect_files with prepare_files stubbed and run_check_mode answering *results* in turn."""
    from railyard.apply.playbooks import PlannedPlaybook

    demo = PlannedPlaybook("demo", "all", ("gpu001",), (), "digest", "fabric", (), {})
    run = FilesRun("- hosts: all\n", "inventory.json", {}, ("gpu001",), ("demo",), ["planned"], (demo,))
    monkeypatch.setattr(C, "prepare_files", lambda *_a, **_k: run)
    calls = []

    def fake(*_a, **_k):
        calls.append(1)
        return results[len(calls) - 1]

    monkeypatch.setattr(C, "run_check_mode", fake)
    return calls


STATS = {"event": "playbook_on_stats", "event_data": {}}


NO_PROBE = RecordedRunner({}, HostUnreachable("not asked for in this test"))


def test_a_check_run_killed_by_a_signal_is_run_once_more(lab_plan, monkeypatch, tmp_path):
    calls = _scripted_check_runs(monkeypatch, [([], ("failed", None, "")), ([STATS], ("successful", 0, ""))])
    obs, notes = C.collect_files(lab_plan, root=tmp_path, runner=NO_PROBE)
    assert len(calls) == 2
    assert obs.roles == ("demo",) and obs.changes == ()
    assert notes == ["planned",
                     ("files: 0 of 1 role-host pairs unchanged since a clean check (one probe per host); 1 ran "
                      "in check mode"),
                     "files: ansible-playbook --check stopped early (failed, killed by a signal); ran it again"]


def test_a_check_run_killed_twice_or_failing_is_an_error(lab_plan, monkeypatch, tmp_path):
    calls = _scripted_check_runs(monkeypatch, [([], ("failed", None, "")), ([], ("failed", None, "boom"))])
    with pytest.raises(C.CollectorError, match=r"killed by a signal\): boom \(also on the run before\)"):
        C.collect_files(lab_plan, root=tmp_path, runner=NO_PROBE)
    assert len(calls) == 2
    calls = _scripted_check_runs(monkeypatch, [([], ("failed", 2, ""))])
    with pytest.raises(C.CollectorError, match=r"stopped early \(failed, exit 2\)$"):
        C.collect_files(lab_plan, root=tmp_path, runner=NO_PROBE)
    assert len(calls) == 1  # an exit code is ansible's own answer: not run again


def test_stack_secrets_from_an_export_with_show_secrets():
    state = {"version": 3, "deployment": {"resources": [
        {"type": "pulumi:pulumi:Stack", "outputs": {}},
        {"type": "pulumi-python:dynamic/railyard/secrets:Key", "outputs": {
            "purpose": "munge", "length": 1024,
            "value": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                      "plaintext": "\"c2VjcmV0\""}}},
        {"type": "pulumi-python:dynamic/railyard/metal:Node", "outputs": {"value": "not a key"}},
    ]}}
    assert secrets_from_deployment(state) == {"munge": "c2VjcmV0"}


# --------------------------------------------------------------------------- collect()


def test_collect_runs_layers_and_turns_failures_into_errors(lab_plan, tmp_path, monkeypatch):
    root = _roles_root(tmp_path, ["slurm_controller"])

    def broken(*_a, **_k):
        raise C.CollectorError("ansible-playbook --check stopped early (failed, exit 4)")

    monkeypatch.setattr(C, "collect_files", broken)
    monkeypatch.setattr("railyard.drivers.driver_for", lambda spec: FakeDriver({}))
    applied.save(applied.record_path(root, "lab"), {"kw1": RUNTIME, "kw2": RUNTIME})  # as `railyard up` left it
    runner = RecordedRunner(scontrol() | kubectl_answers(lab_plan),
                            default=Result(0, "Id=slurmctld.service\nLoadState=loaded\n"
                                              "ActiveState=active\nUnitFileState=enabled\n", ""))
    observed = collect(lab_plan, ("slurm", "files", "nodes", "kubernetes"), runner, root=root)
    assert observed.layers == ("nodes", "slurm", "kubernetes")
    assert [e.message for e in observed.errors] == [
        "files: ansible-playbook --check stopped early (failed, exit 4)"]
    assert set(observed.timings) == {"nodes", "slurm", "kubernetes"}
    report = compare(lab_plan, observed)
    assert report.findings == ()
    assert report.notes == ()
    assert report.layers == ("nodes", "files", "slurm", "kubernetes")
    assert report.exit_code == exitcodes.ERROR


def test_collect_layer_deadline(lab_plan, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "collect_kubernetes", lambda *_a, **_k: time.sleep(2))
    start = time.monotonic()
    observed = collect(lab_plan, ("kubernetes",), RecordedRunner({}), root=tmp_path,
                       timeouts=Timeouts(command=0.1, kubernetes=0.2))
    assert time.monotonic() - start < 1.5
    assert [e.message for e in observed.errors] == ["kubernetes: no result within 0.3s"]


def test_collect_notes_what_it_cannot_check(lab_plan, tmp_path):
    observed = collect(lab_plan, ("slurm",), RecordedRunner({}), root=tmp_path)
    assert observed.slurm is None
    assert observed.notes == ("slurm: not checked: role slurm_controller does not exist yet",)
    with pytest.raises(ValueError, match="unknown layer"):
        collect(lab_plan, ("dns",), RecordedRunner({}), root=tmp_path)

"""Behaviour of the converged lab Kubernetes partition: control plane, a KWOK worker and a
real-kubelet worker, Kueue, Volcano.

kubectl runs on the control-plane node (``podman exec`` through testinfra) with the
admin kubeconfig the role wrote. Expectations come from the molecule render of the lab
plan (plan.json, kubernetes/*.yaml), never from literals here. Every Job is deleted at
the end of its test so the tests do not depend on their order.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import testinfra
import yaml

from tests.support.topology import hypernode_nodes
from tests.support.verify import ARTIFACTS, assert_running, journal

PLAN = json.loads((ARTIFACTS / "plan.json").read_text())
GROUPS = PLAN["inventory_groups"]
CP_NAME = GROUPS["k8s_control_plane"][0]
WORKERS = GROUPS["k8s_worker"]
CP = testinfra.get_host(f"podman://{CP_NAME}")
KUEUE_DOCS = [d for d in yaml.safe_load_all((ARTIFACTS / "kubernetes/kueue.yaml").read_text()) if d]
VOLCANO_DOCS = [d for d in yaml.safe_load_all((ARTIFACTS / "kubernetes/volcano.yaml").read_text()) if d]
NODE_LABELS = yaml.safe_load((ARTIFACTS / "kubernetes/node-labels.yaml").read_text())
TOPOLOGY = next(d for d in KUEUE_DOCS if d["kind"] == "Topology")
LEVELS = [lvl["nodeLabel"] for lvl in TOPOLOGY["spec"]["levels"]]
SU_LABEL = LEVELS[-2]  # the level above the node: the scalable unit
LQ = next(d for d in KUEUE_DOCS if d["kind"] == "LocalQueue")
CQ = next(d for d in KUEUE_DOCS if d["kind"] == "ClusterQueue")
PLAN_GPUS = {n: json.loads((ARTIFACTS / f"ansible/host_vars/{n}.json").read_text()).get("railyard_gpus", {}).get("count", 0)
             for n in WORKERS}
# Which agent each worker runs, as this scenario's inventory sets it (the role's default: kwok).
_HOST_VARS = yaml.safe_load((Path(__file__).resolve().parents[1] / "molecule.yml").read_text())[
    "provisioner"]["inventory"].get("host_vars", {})
AGENT = {n: _HOST_VARS.get(n, {}).get("k8s_worker_kubelet", "kwok") for n in WORKERS}
IMAGE = _HOST_VARS[next(n for n in WORKERS if AGENT[n] == "kubelet")]["k8s_worker_sandbox_image"]
GPU_QUOTA = int(next(r["nominalQuota"] for g in CQ["spec"]["resourceGroups"] for f in g["flavors"]
                     for r in f["resources"] if r["name"] == "nvidia.com/gpu"))


def kubectl(*args: str, stdin: str | None = None, check: bool = True):
    cmd = "kubectl " + " ".join(f"'{a}'" for a in args)
    if stdin is not None:
        cmd = f"cat <<'EOF_RAILYARD' | {cmd}\n{stdin}\nEOF_RAILYARD"
    out = CP.run(cmd)
    if check and out.rc != 0:
        pytest.fail(f"{cmd} -> rc {out.rc}\n{out.stdout}{out.stderr}")
    return out


def get(*args: str):
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def wait(pred, timeout: float, step: float = 0.5):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return time.monotonic() - t0, got
        time.sleep(step)
    return None, None


def job(name: str, pods: int, gpus: int, annotation: dict[str, str] | None = None) -> str:
    ns, queue = LQ["metadata"]["namespace"], LQ["metadata"]["name"]
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "parallelism": pods, "completions": pods, "suspend": True,
            "template": {
                "metadata": {"annotations": annotation or {}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
                    # KWOK runs no container; the real kubelet runs the locally imported image
                    "name": "train", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)},
                                  "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            },
        },
    })


def workload_of(name: str) -> dict | None:
    ns = LQ["metadata"]["namespace"]
    items = get("workloads", "-n", ns)["items"]
    return next((w for w in items if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))), None)


def condition(obj: dict | None, kind: str) -> dict:
    return next((c for c in (obj or {}).get("status", {}).get("conditions", []) if c["type"] == kind), {})


def running_pods(name: str) -> list[dict]:
    ns = LQ["metadata"]["namespace"]
    pods = get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={name}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def delete_job(name: str) -> None:
    ns = LQ["metadata"]["namespace"]
    kubectl("delete", "job", name, "-n", ns, "--ignore-not-found", "--cascade=foreground", "--wait=true",
            "--timeout=60s", check=False)


# -- the control plane and the nodes ----------------------------------------------------
@pytest.mark.parametrize("unit", ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kueue",
                                  "vc-scheduler", "vc-controller-manager"])
def test_control_plane_units_run(unit):
    assert_running(CP, unit)


@pytest.mark.parametrize("name", WORKERS)
def test_each_worker_runs_its_agent(name):
    host = testinfra.get_host(f"podman://{name}")
    for unit in (["containerd", "kubelet"] if AGENT[name] == "kubelet" else ["kwok"]):
        assert_running(host, unit)


def test_both_agents_are_covered():
    assert sorted(set(AGENT.values())) == ["kubelet", "kwok"], AGENT


def test_the_real_kubelet_runs_a_container_with_its_limits():
    """A pod on the kubelet worker runs the locally imported image; its memory limit is
    the container's cgroup limit (cgroup v1 here)."""
    node = next(n for n in WORKERS if AGENT[n] == "kubelet")
    name = "limits-probe"
    kubectl("delete", "pod", name, "--ignore-not-found", "--grace-period=0", "--force", check=False)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; sleep 3600"],
                                    "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}}]}}
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        took, got = wait(lambda: (p := get("pod", name))["status"].get("phase") == "Running" and p, 60)
        assert took is not None, (get("pod", name)["status"], journal(testinfra.get_host(f"podman://{node}"), "kubelet"))
        print(f"\npod Running on the real kubelet {time.monotonic() - t0:.2f} s after creation")
        host = testinfra.get_host(f"podman://{node}")
        uid = got["metadata"]["uid"]
        logs = host.run(f"cat /var/log/pods/default_{name}_{uid}/c/0.log")
        assert logs.rc == 0 and str(64 * 1024 * 1024) in logs.stdout, logs.stdout + logs.stderr
        assert got["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    finally:
        kubectl("delete", "pod", name, "--ignore-not-found", "--grace-period=0", "--force", check=False)


def test_keys_are_private():
    keys = CP.run("find /etc/kubernetes/pki /etc/kueue -name '*.key' -printf '%m %u %p\\n'").stdout.split("\n")
    keys = [k for k in keys if k]
    assert len(keys) >= 6, keys
    assert all(k.startswith("600 root ") for k in keys), keys
    for name in WORKERS:
        d = "/etc/kwok" if AGENT[name] == "kwok" else "/etc/kubernetes/kubelet"
        f = testinfra.get_host(f"podman://{name}").file(f"{d}/pki/node.key")
        assert f.mode == 0o600 and f.user == "root"


def test_kubeconfigs_hold_no_key_material():
    for conf in ("admin", "controller-manager", "scheduler", "kueue", "vc-scheduler", "vc-controller-manager"):
        text = CP.file(f"/etc/kubernetes/{conf}.conf").content_string
        assert "client-key: /etc/kubernetes/pki/" in text and "PRIVATE KEY" not in text, conf


def test_nodes_are_ready_with_the_plans_labels_and_capacity():
    nodes = {n["metadata"]["name"]: n for n in get("nodes")["items"]}
    assert sorted(nodes) == sorted(WORKERS)
    for name, node in nodes.items():
        ready = condition(node, "Ready")
        agent = "kubelet" if AGENT[name] == "kubelet" else "kwok"
        assert ready.get("status") == "True", (name, ready, journal(testinfra.get_host(f"podman://{name}"), agent))
        labels = node["metadata"]["labels"]
        assert {k: labels.get(k) for k in NODE_LABELS[name]} == NODE_LABELS[name]
        gpus = PLAN_GPUS[name]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(gpus)
        runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert runtime.startswith("containerd://" if AGENT[name] == "kubelet" else "kwok"), (name, runtime)


def test_slurm_and_kubernetes_name_the_same_scalable_units():
    """Each worker's SU label is the fabric group the plan puts it in (fabric_<su>), as for Slurm's switches."""
    for name in WORKERS:
        su = NODE_LABELS[name][SU_LABEL]
        assert name in GROUPS[f"fabric_{su}"], (name, su)


def test_compiled_objects_are_on_the_server_and_unchanged():
    for kind, docs in (("kueue", KUEUE_DOCS), ("volcano", VOLCANO_DOCS)):
        out = kubectl("diff", "--server-side", "--field-manager=railyard", "-f",
                      f"/etc/kubernetes/railyard/{kind}.yaml", check=False)
        assert out.rc == 0, f"{kind}.yaml differs from the server:\n{out.stdout}{out.stderr}"
        assert docs
    cq = get("clusterqueue", CQ["metadata"]["name"])
    assert condition(cq, "Active").get("status") == "True", cq.get("status")


def test_volcano_scheduler_runs_the_compiled_configuration():
    want = (ARTIFACTS / "kubernetes/volcano-scheduler.conf").read_text()
    assert "network-topology-aware" in want
    assert CP.file("/etc/volcano/volcano-scheduler.conf").content_string == want
    cmdline = CP.run("systemctl show -p ExecStart --value vc-scheduler").stdout
    assert "--scheduler-conf=/etc/volcano/volcano-scheduler.conf" in cmdline, cmdline


# -- scheduling ---------------------------------------------------------------------------
def test_topology_aware_job_lands_in_one_scalable_unit():
    """Two pods x 1 GPU that must share one SU: admitted with a topology assignment, and
    both pods run on nodes with the same SU label."""
    name = "tas-one-su"
    delete_job(name)
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", stdin=job(name, 2, 1, {"kueue.x-k8s.io/podset-required-topology": SU_LABEL}))
    try:
        took, wl = wait(lambda: (w := workload_of(name)) and condition(w, "Admitted").get("status") == "True" and w, 60)
        assert took is not None, f"not admitted in 60 s: {workload_of(name)}"
        print(f"\nTAS job admitted {time.monotonic() - t0:.2f} s after it was created")
        assignment = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
        assert assignment["levels"], assignment
        ran, pods = wait(lambda: len(p := running_pods(name)) == 2 and p, 60)
        assert ran is not None, kubectl("get", "pods", "-A", "-o", "wide").stdout
        print(f"both pods Running {time.monotonic() - t0:.2f} s after the job was created")
        nodes = {p["spec"]["nodeName"] for p in pods}
        sus = {NODE_LABELS[n][SU_LABEL] for n in nodes}
        assert len(sus) == 1, f"pods on {nodes} span SUs {sus}"
    finally:
        delete_job(name)


def test_job_over_the_quota_waits_until_quota_frees():
    first, second = "fills-quota", "over-quota"
    per_node = max(PLAN_GPUS.values())
    pods = GPU_QUOTA // per_node
    for n in (first, second):
        delete_job(n)
    try:
        kubectl("apply", "-f", "-", stdin=job(first, pods, per_node))
        took, _ = wait(lambda: condition(workload_of(first), "Admitted").get("status") == "True", 60)
        assert took is not None, f"{first} not admitted: {workload_of(first)}"
        kubectl("apply", "-f", "-", stdin=job(second, 1, 1))
        wait(lambda: workload_of(second), 30)
        time.sleep(5)  # Kueue has had every chance to admit it
        wl = workload_of(second)
        reserved = condition(wl, "QuotaReserved")
        assert reserved.get("status") != "True", f"{second} got quota while {first} holds all of it: {wl}"
        print(f"\n{second} pending: {reserved.get('reason')}: {reserved.get('message')}")
        assert not running_pods(second)
        t0 = time.monotonic()
        delete_job(first)
        took, _ = wait(lambda: condition(workload_of(second), "Admitted").get("status") == "True", 60)
        assert took is not None, f"{second} not admitted after {first} freed the quota: {workload_of(second)}"
        print(f"{second} admitted {time.monotonic() - t0:.2f} s after {first} was deleted")
    finally:
        for n in (first, second):
            delete_job(n)


VQUEUE = next(d for d in VOLCANO_DOCS if d["kind"] == "Queue")["metadata"]["name"]


def volcano_job(name: str, pods: int, tier: int) -> str:
    """A gang of *pods* x 1 GPU (minAvailable = pods) inside one HyperNode of *tier* or below."""
    return json.dumps({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "volcano", "queue": VQUEUE, "minAvailable": pods,
            "networkTopology": {"mode": "hard", "highestTierAllowed": tier},
            "tasks": [{"name": "worker", "replicas": pods, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "train", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                                  "limits": {"nvidia.com/gpu": "1"}}}]}}}],
        },
    })


def test_volcano_places_a_hard_tier1_gang_inside_one_hypernode():
    """vc-scheduler, as the role runs it, puts a gang that must stay in one tier-1 HyperNode
    (an SU) on that SU's workers; the controllers made its pods and PodGroup."""
    tier1 = {n: hn for hn, members in hypernode_nodes(VOLCANO_DOCS, 1).items() for n in members}
    per_su = min(sum(PLAN_GPUS[n] for n in WORKERS if tier1.get(n) == hn) for hn in set(tier1.values()))
    name, pods = "vc-hard-tier1", min(2, per_su)
    sel = f"volcano.sh/job-name={name}"
    kubectl("delete", "jobs.batch.volcano.sh", name, "--ignore-not-found", "--wait=true", check=False)
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", stdin=volcano_job(name, pods, 1))
    try:
        def placed():
            got = get("pods", "-l", sel)["items"]
            return len(got) == pods and all(p["status"].get("phase") == "Running" for p in got) and got
        took, got = wait(placed, 90)
        assert took is not None, (kubectl("get", "pods,podgroups", "-o", "wide").stdout
                                  + journal(CP, "vc-scheduler"))
        nodes = {p["spec"]["nodeName"] for p in got}
        print(f"\nVolcano hard tier-1 gang of {pods}: Running {time.monotonic() - t0:.2f} s after creation on {nodes}")
        assert len({tier1[n] for n in nodes}) == 1, f"pods on {nodes} span HyperNodes {[tier1[n] for n in nodes]}"
    finally:
        kubectl("delete", "jobs.batch.volcano.sh", name, "--ignore-not-found", "--wait=true", check=False)
        kubectl("delete", "pods", "-l", sel, "--grace-period=0", "--force", "--ignore-not-found", check=False)

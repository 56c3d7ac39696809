"""Issue 6: Kueue admits topology-aware GPU jobs against railyard's compiled objects.

A private etcd + kube-apiserver (:mod:`tests.support.k8sapi`) with the whole stack of
:func:`tests.support.k8slab.start_stack`: the pinned CRDs, one spec's compiled objects,
kube-controller-manager, kube-scheduler, KWOK with the plan's Kubernetes workers as
Ready nodes (compiled labels, the spec's GPUs as ``nvidia.com/gpu``) and the Kueue
manager with its webhooks.  Jobs are plain batch/v1 Jobs with a queue label; KWOK runs
their pods (no kubelet, no images), so what is proven is admission and placement.

Two specs: dgx-h100 (32 workers of 8 GPUs in one SU: a job of several whole nodes) and
the lab (2 workers of 2 stand-in GPUs, one per SU, quota = all 4: wider than an SU,
over quota).  Each test deletes its jobs and waits until their Workloads are gone.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.conftest import ROOT
from tests.support import k8sapi, k8slab
from tests.support.topology import hypernode_nodes

pytestmark = pytest.mark.k8s

SPECS = {
    "lab": ROOT / "inventories/lab/cluster.yaml",
    "dgx-h100": ROOT / "inventories/dgx-h100/cluster.yaml",
}


def on(spec: str):
    """Run a test against the stack of *spec* (pytest groups tests by it: one stack at a time)."""
    return pytest.mark.parametrize("stack", [spec], indirect=True)


@pytest.fixture(scope="module")
def stack(request, tmp_path_factory):
    missing = k8slab.missing_binaries(k8sapi.find_bin_dir())
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not built: run scripts/build-k8s.sh (scripts/bootstrap.sh does)"
        )
    work = tmp_path_factory.mktemp(f"k8s-{request.param}")
    t0 = time.monotonic()
    with k8sapi.K8sAPI.start(work) as api:
        print(f"\n{request.param}: etcd + kube-apiserver ready in {time.monotonic() - t0:.1f} s")
        s = k8slab.start_stack(api, SPECS[request.param], work / "render", log=print)
        assert not s.rejected(), s.rejected()
        yield s


@pytest.fixture
def jobs(stack):
    """Jobs a test created, as (namespace, name); deleted afterwards, Workloads and pods gone."""
    created: list[tuple[str, str]] = []
    yield created
    for ns, name in created:
        k8slab.delete_job(stack.api, ns, name)


def _submit(stack, jobs, job) -> float:
    jobs.append((job["metadata"]["namespace"], job["metadata"]["name"]))
    return k8slab.submit(stack.api, job)


def _wait_admitted(stack, ns: str, name: str, timeout: float = 60) -> dict:
    api = stack.api
    took = k8slab.wait_for(
        lambda: k8slab.admitted(k8slab.workload_of(api, ns, name)), timeout, 0.05
    )
    w = k8slab.workload_of(api, ns, name)
    assert took is not None, f"{ns}/{name} not admitted in {timeout}s: {_conditions(w)}"
    return w


def _wait_running(stack, ns: str, name: str, n: int, timeout: float = 60) -> list[dict]:
    api = stack.api
    took = k8slab.wait_for(
        lambda: k8slab.all_running(k8slab.pods_of(api, ns, name), n), timeout, 0.05
    )
    pods = k8slab.pods_of(api, ns, name)
    assert took is not None, f"{ns}/{name}: not {n} pods Running in {timeout}s: " + str(
        [(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName")) for p in pods]
    )
    return pods


def _conditions(w: dict | None) -> list[str]:
    return [
        f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
        for c in ((w or {}).get("status") or {}).get("conditions") or []
    ]


def _node_labels(stack) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in stack.nodes}


def _gpus_per_node(stack) -> int:
    gpus = {int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in stack.nodes}
    assert len(gpus) == 1, f"workers differ in GPU count: {gpus}"
    return gpus.pop()


def _su_level(stack) -> str:
    """The compiled Topology's SU level (not a literal: whatever label the compiler chose)."""
    return next(lvl for lvl in stack.levels if lvl.endswith("/su"))


@on("dgx-h100")
def test_a_required_su_job_runs_on_several_nodes_of_one_su(stack, jobs):
    su, ns, queue = _su_level(stack), *stack.local_queue("training")
    per_node = _gpus_per_node(stack)
    nodes_per_su = Counter(labels[su] for labels in _node_labels(stack).values())
    pods = 4  # whole nodes: the job needs 4 nodes, and an SU has more
    assert pods <= max(nodes_per_su.values()), nodes_per_su
    assert pods * per_node <= stack.gpu_quota("training")

    t0 = _submit(
        stack, jobs, k8slab.gpu_job("tas", ns, queue, pods=pods, gpus=per_node, topology=su)
    )
    w = _wait_admitted(stack, ns, "tas")
    admit_s = time.monotonic() - t0
    placed = _wait_running(stack, ns, "tas", pods)
    running_s = time.monotonic() - t0
    ta = w["status"]["admission"]["podSetAssignments"][0].get("topologyAssignment")
    print(
        f"\ntas: {pods} x {per_node} GPUs admitted in {admit_s:.2f} s, all Running in "
        f"{running_s:.2f} s; topologyAssignment {json.dumps(ta)}"
    )
    assert ta and ta["levels"] and ta["slices"], w["status"]["admission"]
    on_nodes = {p["spec"]["nodeName"] for p in placed}
    labels = _node_labels(stack)
    assert len({labels[n][su] for n in on_nodes}) == 1, {n: labels[n][su] for n in on_nodes}
    assert len(on_nodes) == pods > 1, on_nodes


@on("lab")
def test_b_a_job_within_quota_but_wider_than_any_su_is_not_admitted(stack, jobs):
    su, ns, queue = _su_level(stack), *stack.local_queue()
    api = stack.api
    cq = next(q["spec"]["clusterQueue"] for q in stack.compiled("LocalQueue"))
    gpus_per_su = Counter()
    for n in stack.nodes:
        gpus_per_su[n["metadata"]["labels"][su]] += int(
            n["status"]["allocatable"]["nvidia.com/gpu"]
        )
    widest = max(gpus_per_su.values())
    assert widest + 1 <= stack.gpu_quota(cq), (gpus_per_su, stack.gpu_quota(cq))

    _submit(stack, jobs, k8slab.gpu_job("wide", ns, queue, pods=widest + 1, gpus=1, topology=su))

    def refused() -> dict | None:
        c = k8slab.condition(k8slab.workload_of(api, ns, "wide"), "QuotaReserved")
        return c if c and c["status"] == "False" and c.get("message") else None

    assert k8slab.wait_for(refused, 30, 0.1) is not None, _conditions(
        k8slab.workload_of(api, ns, "wide")
    )
    first = refused()  # with the whole quota free: only the topology can say no
    print(
        f"\nwide ({widest + 1} x 1 GPU, SUs hold {dict(gpus_per_su)}, quota "
        f"{stack.gpu_quota(cq)}), quota free: {first['reason']}: {first['message']}"
    )
    assert "topology" in first["message"], first["message"]
    # a job that fits one SU goes past it (BestEffortFIFO), onto one SU
    t0 = _submit(stack, jobs, k8slab.gpu_job("narrow", ns, queue, pods=widest, gpus=1, topology=su))
    _wait_admitted(stack, ns, "narrow")
    admit_s = time.monotonic() - t0
    placed = _wait_running(stack, ns, "narrow", widest)
    labels = _node_labels(stack)
    assert len({labels[p["spec"]["nodeName"]][su] for p in placed}) == 1, placed
    time.sleep(2)
    wide = k8slab.workload_of(api, ns, "wide")
    c = k8slab.condition(wide, "QuotaReserved")
    print(
        f"narrow ({widest} x 1 GPU) admitted in {admit_s:.2f} s; wide still "
        f"QuotaReserved={c['status']} {c['reason']}: {c['message']}"
    )
    assert not k8slab.admitted(wide) and c["status"] == "False", _conditions(wide)
    assert k8slab.pods_of(api, ns, "wide") == []


@on("lab")
def test_c_a_job_over_quota_waits_until_quota_is_freed(stack, jobs):
    ns, queue = stack.local_queue()
    api = stack.api
    cq = next(q["spec"]["clusterQueue"] for q in stack.compiled("LocalQueue"))
    quota, per_node = stack.gpu_quota(cq), _gpus_per_node(stack)
    assert quota % per_node == 0 and quota // per_node == len(stack.nodes), "quota = all GPUs"

    _submit(stack, jobs, k8slab.gpu_job("a", ns, queue, pods=quota // per_node, gpus=per_node))
    _wait_admitted(stack, ns, "a")
    _wait_running(stack, ns, "a", quota // per_node)
    _submit(stack, jobs, k8slab.gpu_job("b", ns, queue, pods=1, gpus=1))
    pending_for = 3.0
    t_end = time.monotonic() + pending_for
    while time.monotonic() < t_end:
        w = k8slab.workload_of(api, ns, "b")
        c = k8slab.condition(w, "QuotaReserved")
        assert not k8slab.admitted(w) and (c is None or c["status"] == "False"), _conditions(w)
        assert k8slab.pods_of(api, ns, "b") == []
        time.sleep(0.2)
    assert c is not None, f"b has no QuotaReserved condition after {pending_for}s: {_conditions(w)}"
    print(
        f"\nb while a holds all {quota} GPUs: QuotaReserved={c['status']} {c['reason']}: {c['message']}"
    )

    t0 = time.monotonic()
    k8slab.delete_job(api, ns, "a", wait=False)  # the Job in the background, its pods now
    _wait_admitted(stack, ns, "b", timeout=60)
    admit_s = time.monotonic() - t0
    _wait_running(stack, ns, "b", 1)
    print(
        f"b admitted {admit_s:.2f} s after a was deleted, Running after {time.monotonic() - t0:.2f} s"
    )


def _volcano_placed(stack, ns: str, name: str, n: int, timeout: float = 60) -> dict[str, str]:
    """pod -> node once all *n* pods of Volcano Job *name* are bound and Running."""
    api = stack.api

    def placed() -> bool:
        pods = k8slab.volcano_pods(api, ns, name)
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    took = k8slab.wait_for(placed, timeout, 0.1)
    pods = k8slab.volcano_pods(api, ns, name)
    assert took is not None, f"{ns}/{name}: not {n} pods Running in {timeout}s: " + str(
        [(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName")) for p in pods]
    ) + "\n" + api.log_tail("vc-scheduler", 15)
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}


def _hypernodes(stack, tier: int) -> dict[str, set[str]]:
    return hypernode_nodes(k8slab.k8s_docs(stack.render_dir / "kubernetes/volcano.yaml"), tier)


@on("lab")
def test_d_volcano_places_a_hard_tier1_job_inside_one_hypernode(stack):
    """The lab: two workers of 2 GPUs, one per SU (tier-1 HyperNode).  A gang of 3 x 1 GPU
    spreads over both SUs when unconstrained, stays pending with networkTopology hard at
    tier 1 (no SU has 3 GPUs), runs at tier 2 (the spine holds both); 2 x 1 GPU at tier 1
    lands inside one SU."""
    api = stack.api
    ns, queue = "volcano-jobs", "research"
    k8slab.kubectl(api, "create", "namespace", ns)
    su_of = {n: hn for hn, members in _hypernodes(stack, 1).items() for n in members}
    assert len(set(su_of.values())) >= 2, su_of

    def run(name: str, pods: int, tier: int | None) -> float:
        t0 = time.monotonic()
        r = k8slab.apply_docs(api, [k8slab.volcano_job(name, ns, queue, pods, tier=tier)], name, "railyard-test")
        assert all(x.ok for x in r), [x.message for x in r]
        return t0

    def delete(name: str) -> None:
        k8slab.kubectl(api, "delete", "jobs.batch.volcano.sh", name, "-n", ns, "--wait=true")
        k8slab.kubectl(api, "delete", "pods", "-n", ns, "-l", f"volcano.sh/job-name={name}",
                       "--grace-period=0", "--force", "--wait=true")

    t0 = run("spread", 3, None)
    spread = _volcano_placed(stack, ns, "spread", 3)
    print(f"\nno topology: 3 pods Running in {time.monotonic() - t0:.2f} s on {sorted(spread.values())}")
    assert len({su_of[n] for n in spread.values()}) == 2, spread
    delete("spread")

    run("hard1-wide", 3, 1)
    time.sleep(10)  # several scheduling periods (1 s each)
    pods = k8slab.volcano_pods(api, ns, "hard1-wide")
    bound = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
    pg = k8slab.kubectl(api, "get", "podgroups", "-n", ns, "-o", "json")
    print(f"hard tier 1, 3 pods: {len(pods)} pods, bound {bound}; podgroup conditions: "
          + str([c for item in json.loads(pg.stdout)["items"] for c in item["status"].get("conditions", [])]))
    assert len(pods) == 3 and bound == [], (len(pods), bound)  # the gang exists, none of it placed
    delete("hard1-wide")

    t0 = run("hard2-wide", 3, 2)
    wide = _volcano_placed(stack, ns, "hard2-wide", 3)
    print(f"hard tier 2, 3 pods: Running in {time.monotonic() - t0:.2f} s on {sorted(wide.values())}")
    delete("hard2-wide")

    t0 = run("hard1", 2, 1)
    placed = _volcano_placed(stack, ns, "hard1", 2)
    print(f"hard tier 1, 2 pods: Running in {time.monotonic() - t0:.2f} s on {sorted(placed.values())}")
    assert len({su_of[n] for n in placed.values()}) == 1, placed
    delete("hard1")


@pytest.mark.parametrize("stack", ["lab", "dgx-h100"], indirect=True)
def test_reapplying_the_compiled_objects_once_kueue_runs_is_conflict_free(stack):
    """A second deploy (or drift's --remediate) after Kueue has reconciled the queues."""
    assert stack.reapplied, "start_stack did not apply the objects a second time"
    assert not stack.rejected(again=True), stack.rejected(again=True)

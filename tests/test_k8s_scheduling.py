"""Issue 6: Kueue admits topology-aware GPU jobs against railyard's compiled objects.

A private etcd + kube-apiserver (:mod:`tests.support.k8sapi`) with the whole stack of
:func:`tests.support.k8slab.start_stack`: the pinned CRDs, one spec's compiled objects,
kube-controller-manager, kube-scheduler, KWOK with the plan's Kubernetes workers as
Ready nodes (compiled labels, the spec's GPUs as ``nvidia.com/gpu``) and the Kueue
manager with its webhooks.  Jobs are plain batch/v1 Jobs with a queue label; KWOK runs
their pods (no kubelet, no images), so what is proven is admission and placement.

Specs: dgx-h100 with its Kubernetes workers moved to span two SUs (su3: 8 nodes, su4: 32;
jobs of whole nodes), the lab (2 workers of 2 stand-in GPUs, kw1 in su1 and kw2 in su2,
quota = all 4) and, for re-applying its objects, dgx-h100 as shipped.  Every topology
claim is made where placement blind to topology would break it (a job that fits only one
of the SUs, or a node made half busy so that the free GPUs span both SUs), next to a
CONTROL: the same job without the constraint, asserted to land across SUs.  Expected SUs
are literals (the spec YAML's hostlists), never the compiler's plan.  Each test deletes
its jobs and waits until their Workloads are gone.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import yaml

from tests.conftest import ROOT
from tests.support import k8sapi, k8slab
from tests.support.topology import hypernode_nodes

pytestmark = pytest.mark.k8s

SPECS = {
    "lab": ROOT / "inventories/lab/cluster.yaml",
    "dgx-h100": ROOT / "inventories/dgx-h100/cluster.yaml",
}
# The lab's SUs (inventories/lab/cluster.yaml: su1 = gpu[001-002],kw1; su2 = gpu[003-004],kw2).
LAB_SU = {"kw1": "su1", "kw2": "su2"}
# dgx-h100 with Kubernetes on the last 4 nodes of SU 3 as well as all of SU 4 (the spec's
# SUs are 32 nodes each, in order: su3 = dgx[065-096], su4 = dgx[097-128]).
DGX_2SU = {
    "slurm_gpu": "dgx[001-092]",
    "workers": "dgx[093-128]",
    "su": {
        **{f"dgx{i:03}": "su3" for i in range(93, 97)},
        **{f"dgx{i:03}": "su4" for i in range(97, 129)},
    },
}


def _spec_path(name: str, work) -> object:
    if name != "dgx-h100-2su":
        return SPECS[name]
    spec = yaml.safe_load(SPECS["dgx-h100"].read_text())
    gpu = next(p for p in spec["partitions"]["slurm"]["partitions"] if p["name"] == "gpu")
    gpu["nodes"] = DGX_2SU["slurm_gpu"]
    spec["partitions"]["kubernetes"]["workers"] = DGX_2SU["workers"]
    path = work / "dgx-h100-2su.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


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
        spec = _spec_path(request.param, work)
        s = k8slab.start_stack(api, spec, work / "render", log=print)
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


def _placed_sus(
    stack, ns: str, name: str, pods: int, su_of: dict[str, str]
) -> tuple[dict, list[str]]:
    """(the admitted Workload, the SU of each node its pods run on), once all pods Run."""
    w = _wait_admitted(stack, ns, name)
    placed = _wait_running(stack, ns, name, pods)
    return w, sorted(su_of[p["spec"]["nodeName"]] for p in placed)


def _check_su_labels(stack, su: str, su_of: dict[str, str]) -> None:
    """The nodes carry the SU the spec's hostlists put them in (what Kueue groups by)."""
    labels = _node_labels(stack)
    assert {n: labels[n][su] for n in su_of} == su_of


@on("dgx-h100-2su")
def test_a_required_and_preferred_su_keep_whole_nodes_in_one_su_where_the_control_spans_two(
    stack, jobs
):
    """Workers in su3 (4 nodes) and su4 (32): 5 whole nodes fit only su4.  CONTROL: the
    job without a topology annotation spans both SUs (Kueue's unconstrained placement
    fills the least free nodes first, in label order: su3's four, then one of su4); with
    the SU level required, and with it preferred, all 5 pods run in su4."""
    su, ns, queue = _su_level(stack), *stack.local_queue("training")
    su_of = DGX_2SU["su"]
    _check_su_labels(stack, su, su_of)
    per_node, pods = _gpus_per_node(stack), 5
    assert pods * per_node <= stack.gpu_quota("training")

    def run(name: str, **topology) -> tuple[dict, list[str]]:
        t0 = _submit(
            stack, jobs, k8slab.gpu_job(name, ns, queue, pods=pods, gpus=per_node, **topology)
        )
        w, sus = _placed_sus(stack, ns, name, pods, su_of)
        print(
            f"{name}: {pods} x {per_node} GPUs Running {time.monotonic() - t0:.2f} s after "
            f"creation, in {dict(Counter(sus))}"
        )
        k8slab.delete_job(stack.api, ns, name)
        return w, sus

    print()
    _, sus = run("control")
    assert set(sus) == {"su3", "su4"}, f"CONTROL stayed in one SU, the test proves nothing: {sus}"
    w, sus = run("required", topology=su)
    ta = w["status"]["admission"]["podSetAssignments"][0].get("topologyAssignment")
    assert ta and ta["levels"] and ta["slices"], w["status"]["admission"]
    assert set(sus) == {"su4"}, sus
    _, sus = run("preferred", topology=su, required=False)
    assert set(sus) == {"su4"}, sus


@pytest.fixture
def kw1_half_busy(stack):
    """kw1 (su1) with one of its 2 GPUs held by a pod bound to it: the 3 free GPUs are one
    on kw1 and two on kw2 (su2), so a 2-GPU job fits su2 alone or the two SUs together."""
    assert {n["metadata"]["name"] for n in stack.nodes} == set(LAB_SU)
    pod = k8slab.bound_pod("busy-kw1", "default", "kw1", gpus=1)
    k8slab.create_running_pod(stack.api, pod)
    yield "kw1"
    k8slab.delete_pod(stack.api, "default", "busy-kw1")


@on("lab")
def test_b_a_job_within_quota_but_wider_than_any_su_is_not_admitted(stack, jobs):
    """3 x 1 GPU on the idle lab (2 GPUs per SU, quota 4): SU required, it is not admitted,
    with Kueue's reason, while a narrower job goes past it.  CONTROL: the same job without
    the annotation runs across su1 and su2; with the SU level preferred, it runs too."""
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

    # CONTROL: the same wide job without the annotation runs, across both SUs; with the SU
    # level only preferred it runs too, across both SUs (Kueue falls back to the spine)
    for name in ("wide", "narrow"):
        k8slab.delete_job(api, ns, name)
    _check_su_labels(stack, su, LAB_SU)
    for name, kind in (
        ("wide-control", {}),
        ("wide-preferred", {"topology": su, "required": False}),
    ):
        t0 = _submit(stack, jobs, k8slab.gpu_job(name, ns, queue, pods=widest + 1, gpus=1, **kind))
        _, sus = _placed_sus(stack, ns, name, widest + 1, LAB_SU)
        print(
            f"{name}: {widest + 1} x 1 GPU Running {time.monotonic() - t0:.2f} s after creation, SUs {sus}"
        )
        k8slab.delete_job(api, ns, name)
        assert set(sus) == {"su1", "su2"}, (name, sus)


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
    assert took is not None, (
        f"{ns}/{name}: not {n} pods Running in {timeout}s: "
        + str(
            [
                (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"))
                for p in pods
            ]
        )
        + "\n"
        + api.log_tail("vc-scheduler", 15)
    )
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}


def _hypernodes(stack, tier: int) -> dict[str, set[str]]:
    return hypernode_nodes(k8slab.k8s_docs(stack.render_dir / "kubernetes/volcano.yaml"), tier)


VOLCANO_NS, VOLCANO_QUEUE = "volcano-jobs", "research"


def _volcano_run(stack, name: str, pods: int, tier: int | None) -> float:
    api = stack.api
    k8slab.kubectl(api, "create", "namespace", VOLCANO_NS)  # fails harmlessly once it exists
    t0 = time.monotonic()
    job = k8slab.volcano_job(name, VOLCANO_NS, VOLCANO_QUEUE, pods, tier=tier)
    r = k8slab.apply_docs(api, [job], name, "railyard-test")
    assert all(x.ok for x in r), [x.message for x in r]
    return t0


def _volcano_delete(stack, name: str) -> None:
    api, ns = stack.api, VOLCANO_NS
    k8slab.kubectl(api, "delete", "jobs.batch.volcano.sh", name, "-n", ns, "--wait=true")
    k8slab.kubectl(
        api,
        "delete",
        "pods",
        "-n",
        ns,
        "-l",
        f"volcano.sh/job-name={name}",
        "--grace-period=0",
        "--force",
        "--wait=true",
    )


def _volcano_sus(stack) -> dict[str, str]:
    """node -> tier-1 HyperNode, checked against the spec's SUs (the HyperNodes are named
    after them)."""
    su_of = {n: hn for hn, members in _hypernodes(stack, 1).items() for n in members}
    assert su_of == LAB_SU, su_of
    return su_of


def _podgroup_unschedulable(stack, name: str) -> dict:
    """The Unschedulable condition of Volcano Job *name*'s PodGroup, or {}."""
    pgs = json.loads(
        k8slab.kubectl(stack.api, "get", "podgroups", "-n", VOLCANO_NS, "-o", "json").stdout
    )
    for pg in pgs["items"]:
        if any(o.get("name") == name for o in pg["metadata"].get("ownerReferences", [])):
            for c in pg.get("status", {}).get("conditions") or []:
                if c.get("type") == "Unschedulable" and c.get("status") == "True":
                    return c
    return {}


@on("lab")
def test_d_volcano_a_gang_that_fits_only_split_stays_pending_under_hard_tier1(stack):
    """Idle lab, 2 GPUs per SU.  A gang of 3 x 1 GPU fits only split over both SUs.
    CONTROL (no networkTopology): it runs, across su1 and su2.  Hard tier 1: it stays
    pending, none of it bound, with vc-scheduler's reason on its PodGroup.  Hard tier 2
    (the spine): it runs."""
    su_of = _volcano_sus(stack)
    api = stack.api

    t0 = _volcano_run(stack, "spread", 3, None)
    spread = _volcano_placed(stack, VOLCANO_NS, "spread", 3)
    print(
        f"\nCONTROL, no topology: 3 pods Running in {time.monotonic() - t0:.2f} s on {sorted(spread.values())}"
    )
    assert {su_of[n] for n in spread.values()} == {"su1", "su2"}, spread
    _volcano_delete(stack, "spread")

    _volcano_run(stack, "hard1-wide", 3, 1)
    time.sleep(10)  # several scheduling periods (1 s each)
    pods = k8slab.volcano_pods(api, VOLCANO_NS, "hard1-wide")
    bound = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
    why = _podgroup_unschedulable(stack, "hard1-wide")
    print(
        f"hard tier 1, 3 pods: {len(pods)} pods, bound {bound}; PodGroup Unschedulable: "
        f"{why.get('reason')}: {why.get('message')}"
    )
    assert len(pods) == 3 and bound == [], (len(pods), bound)  # the gang exists, none of it placed
    assert why.get("message"), f"no Unschedulable reason on the PodGroup: {why}"
    _volcano_delete(stack, "hard1-wide")

    t0 = _volcano_run(stack, "hard2-wide", 3, 2)
    wide = _volcano_placed(stack, VOLCANO_NS, "hard2-wide", 3)
    print(
        f"hard tier 2, 3 pods: Running in {time.monotonic() - t0:.2f} s on {sorted(wide.values())}"
    )
    _volcano_delete(stack, "hard2-wide")


@on("lab")
def test_e_volcano_hard_tier1_puts_a_gang_in_su2_where_the_control_splits(stack, kw1_half_busy):
    """1 GPU free on kw1 (su1), 2 on kw2 (su2).  A gang of 2 x 1 GPU: CONTROL (no
    networkTopology) runs on both SUs; hard tier 1 runs both pods in su2."""
    su_of = _volcano_sus(stack)
    print()
    for name, tier, want in (("split", None, {"su1", "su2"}), ("hard1", 1, {"su2"})):
        t0 = _volcano_run(stack, name, 2, tier)
        placed = _volcano_placed(stack, VOLCANO_NS, name, 2)
        print(
            f"{name} (tier {tier}): 2 pods Running in {time.monotonic() - t0:.2f} s on "
            f"{sorted(placed.values())}"
        )
        _volcano_delete(stack, name)
        assert {su_of[n] for n in placed.values()} == want, (name, placed)


@pytest.mark.parametrize("stack", ["lab", "dgx-h100-2su"], indirect=True)
def test_reapplying_the_compiled_objects_once_kueue_runs_is_conflict_free(stack):
    """A second deploy (or drift's --remediate) after Kueue has reconciled the queues."""
    assert stack.reapplied, "start_stack did not apply the objects a second time"
    assert not stack.rejected(again=True), stack.rejected(again=True)

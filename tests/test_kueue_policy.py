"""Batch policy on the Kubernetes partition from the spec (issue 24): priority classes for
both schedulers, Kueue preemption, borrowing and lending limits, fair sharing. What the
compiler writes and what validate refuses. Expected objects are literals; the objects are
accepted by real CRDs in tests/test_k8s_objects.py (the dgx-h100 example uses them all)."""

from __future__ import annotations

import pytest

from railyard.compiler.inventory import cluster_vars
from railyard.compiler.kubernetes import weight_quantity
from tests.support import specs

_refused = specs.refused_at
KUEUE = "kueue.x-k8s.io/v1beta2"
CLASSES = [
    {"name": "training-high", "value": 1000, "description": "Long training runs"},
    {"name": "interactive", "value": 500, "preempts": False},
    {"name": "batch", "value": 100},
]


def _policy(lab: dict, **kueue) -> dict:
    k8s = lab["partitions"]["kubernetes"]
    k8s["priority_classes"] = [dict(c) for c in CLASSES]
    k8s["kueue"] = {
        "cohorts": [{"name": "lab"}],
        "cluster_queues": [
            {"name": "train", "cohort": "lab", "quotas": {"standin": {"gpu": 2, "borrowing_limit": {"gpu": 2}}},
             "preemption": {"within_cluster_queue": "LowerPriority", "reclaim_within_cohort": "Any",
                            "borrow_within_cohort": "LowerPriority", "borrow_max_priority": "batch"}},
            {"name": "serve", "cohort": "lab", "quotas": {"standin": {"gpu": 2, "lending_limit": {"gpu": 1}}}},
        ],
        "local_queues": [{"name": "gpu", "namespace": "team-a", "cluster_queue": "train"}],
        **kueue,
    }
    return lab


def _objects(plan, kind: str) -> dict[str, dict]:
    k = plan.kubernetes
    return {o["metadata"]["name"]: o for o in (*k.kueue, *k.volcano) if o["kind"] == kind}


def _gpu(cq: dict) -> dict:
    return next(r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu")


def test_one_list_of_priorities_gives_both_schedulers_their_classes(lab):
    plan = specs.plan(_policy(lab))
    assert _objects(plan, "WorkloadPriorityClass") == {
        "training-high": {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "training-high"},
                          "value": 1000, "description": "Long training runs"},
        "interactive": {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "interactive"},
                        "value": 500},
        "batch": {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "batch"}, "value": 100},
    }
    core = _objects(plan, "PriorityClass")
    assert {n: (o["apiVersion"], o["value"], o["preemptionPolicy"], o["globalDefault"]) for n, o in core.items()} == {
        "training-high": ("scheduling.k8s.io/v1", 1000, "PreemptLowerPriority", False),
        "interactive": ("scheduling.k8s.io/v1", 500, "Never", False),
        "batch": ("scheduling.k8s.io/v1", 100, "PreemptLowerPriority", False),
    }
    # the WorkloadPriorityClasses in the Kueue objects, the PriorityClasses in Volcano's
    assert {o["kind"] for o in plan.kubernetes.kueue} >= {"WorkloadPriorityClass"}
    assert "PriorityClass" not in {o["kind"] for o in plan.kubernetes.kueue}


def test_preemption_and_limits_reach_the_cluster_queues(lab):
    cqs = _objects(specs.plan(_policy(lab)), "ClusterQueue")
    assert cqs["train"]["spec"]["preemption"] == {
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},  # batch's value
        "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert _gpu(cqs["train"]) == {"name": "nvidia.com/gpu", "nominalQuota": "2", "borrowingLimit": "2"}
    assert _gpu(cqs["serve"]) == {"name": "nvidia.com/gpu", "nominalQuota": "2", "lendingLimit": "1"}
    # a queue without a policy gets Kueue's defaults written out, so a hand edit is drift
    assert cqs["serve"]["spec"]["preemption"] == {
        "borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}
    assert "fairSharing" not in cqs["serve"]["spec"]


def test_fair_sharing_weights_every_queue_and_cohort_and_turns_on_the_manager(lab):
    spec = _policy(lab, fair_sharing=True)
    for cq in spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"]:
        cq.pop("preemption", None)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["fair_sharing_weight"] = 2
    spec["partitions"]["kubernetes"]["kueue"]["cohorts"][0]["fair_sharing_weight"] = 0.5
    plan = specs.plan(spec)
    cqs = _objects(plan, "ClusterQueue")
    assert cqs["train"]["spec"]["fairSharing"] == {"weight": "2"}
    assert cqs["serve"]["spec"]["fairSharing"] == {"weight": "1"}
    assert _objects(plan, "Cohort")["lab"]["spec"] == {"fairSharing": {"weight": "500m"}}
    assert cluster_vars(plan)["railyard_kueue_fair_sharing"] is True
    assert cluster_vars(specs.plan(_policy(lab)))["railyard_kueue_fair_sharing"] is False


@pytest.mark.parametrize("weight,want", [(1, "1"), (2.0, "2"), (0.5, "500m"), (1.5, "1500m"), (0.001, "1m"),
                                         (1000, "1000")])
def test_weights_are_written_as_kueue_writes_them_back(weight, want):
    assert weight_quantity(weight) == want


# --- refused, with the path and the fix ---------------------------------------------------

CQ = "partitions.kubernetes.kueue.cluster_queues"


def test_a_priority_class_a_queue_names_must_be_defined(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["preemption"]["borrow_max_priority"] = "urgent"
    msg = _refused(spec, f"{CQ}[0].preemption.borrow_max_priority")
    assert "no priority class named 'urgent'" in msg and "partitions.kubernetes.priority_classes" in msg


def test_priority_class_names_are_unique(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["priority_classes"].append({"name": "batch", "value": 5})
    assert "batch" in _refused(spec, "partitions.kubernetes.priority_classes")


@pytest.mark.parametrize("limit", ["borrowing_limit", "lending_limit"])
def test_limits_on_a_queue_without_a_cohort_are_refused(lab, limit):
    spec = _policy(lab)
    cq = spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][1]
    cq.pop("cohort")
    cq["quotas"]["standin"] = {"gpu": 2, limit: {"gpu": 1}}
    msg = _refused(spec, f"{CQ}[1].quotas.standin.{limit}")
    assert "is in no cohort" in msg and f"set its cohort or drop {limit}" in msg


def test_lending_more_than_the_nominal_quota_is_refused(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][1]["quotas"]["standin"]["lending_limit"] = {"gpu": 3}
    assert "lower lending_limit.gpu to at most 2" in _refused(spec, f"{CQ}[1].quotas.standin.lending_limit.gpu")


@pytest.mark.parametrize("weight", [0, -1])
def test_a_fair_sharing_weight_must_be_positive(lab, weight):
    spec = _policy(lab, fair_sharing=True)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0].pop("preemption")
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["fair_sharing_weight"] = weight
    assert "greater than 0" in _refused(spec, f"{CQ}[0].fair_sharing_weight")


def test_a_weight_without_fair_sharing_is_refused(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cohorts"][0]["fair_sharing_weight"] = 2
    msg = _refused(spec, "partitions.kubernetes.kueue.cohorts[0].fair_sharing_weight")
    assert "set partitions.kubernetes.kueue.fair_sharing: true or drop the weight" in msg


def test_a_weight_finer_than_kueue_keeps_is_refused(lab):
    spec = _policy(lab, fair_sharing=True)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0].pop("preemption")
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["fair_sharing_weight"] = 0.0005
    assert "more than three decimals" in _refused(spec, f"{CQ}[0].fair_sharing_weight")


def test_preempting_while_borrowing_needs_reclaim_and_classic_preemption(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["preemption"]["reclaim_within_cohort"] = "Never"
    assert "needs reclaim_within_cohort too" in _refused(spec, f"{CQ}[0].preemption.borrow_within_cohort")
    spec = _policy(lab, fair_sharing=True)
    assert "only without fair sharing" in _refused(spec, f"{CQ}[0].preemption.borrow_within_cohort")


def test_cohort_preemption_on_a_queue_without_a_cohort_is_refused(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["quotas"]["standin"].pop("borrowing_limit")
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0].pop("cohort")
    msg = _refused(spec, f"{CQ}[0].preemption.reclaim_within_cohort")
    assert "is in no cohort" in msg and "make it Never" in msg


def test_borrow_max_priority_needs_preemption_while_borrowing(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["preemption"]["borrow_within_cohort"] = "Never"
    assert "set borrow_within_cohort: LowerPriority" in _refused(spec, f"{CQ}[0].preemption.borrow_max_priority")


@pytest.mark.parametrize("field,value,words", [
    ("value", 1_000_000_001, "less than or equal to 1000000000"),
    ("description", "evil\nkey: value", "is not a description"),
    ("description", "x" * 201, "is not a description"),
    ("name", "Batch", "upper-case"),
])
def test_a_bad_priority_class_is_refused(lab, field, value, words):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["priority_classes"][2][field] = value
    assert words in _refused(spec, f"partitions.kubernetes.priority_classes[2].{field}")


def test_an_unknown_preemption_policy_is_refused(lab):
    spec = _policy(lab)
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][0]["preemption"]["within_cluster_queue"] = "Always"
    assert "LowerPriority" in _refused(spec, f"{CQ}[0].preemption.within_cluster_queue")


# --- drift: the kubernetes layer reads the objects back ---------------------------------


def test_a_priority_value_or_a_preemption_policy_edited_by_hand_is_drift(lab):
    import copy

    from railyard.drift.compare import compare
    from railyard.drift.observed import KubernetesObservation, Observed

    plan = specs.plan(_policy(lab))
    k = plan.kubernetes
    got = [copy.deepcopy(o) for o in (*k.kueue, *k.volcano)]
    for o in got:
        if o["kind"] == "WorkloadPriorityClass" and o["metadata"]["name"] == "batch":
            o["value"] = 50
        if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "train":
            o["spec"]["preemption"]["withinClusterQueue"] = "Never"
    got = [o for o in got if not (o["kind"] == "PriorityClass" and o["metadata"]["name"] == "interactive")]
    obs = KubernetesObservation(deployed=True, objects=tuple(got))
    found = {(f.kind, f.subject, f.expected, f.observed) for f in compare(plan, Observed(kubernetes=obs)).findings
             if f.kind.startswith("object_")}
    assert found == {
        ("object_field", "WorkloadPriorityClass/batch", "100", "50"),
        ("object_field", "ClusterQueue/train", "'LowerPriority'", "'Never'"),
        ("object_missing", "PriorityClass/interactive", "present", "missing"),
    }


def test_a_gpu_limit_on_a_flavor_without_gpus_is_refused(lab):
    spec = _policy(lab)
    spec["nodes"].append({"group": "cpuw", "names": "kw9", "hardware": {"sockets": 1, "cores_per_socket": 2,
                                                                       "threads_per_core": 1, "memory_mb": 1000}})
    spec["partitions"]["kubernetes"]["workers"] += ",kw9"
    spec["partitions"]["kubernetes"]["kueue"]["cluster_queues"][1]["quotas"]["cpu"] = {"borrowing_limit": {"gpu": 1}}
    assert "have no GPUs" in _refused(spec, f"{CQ}[1].quotas.cpu.borrowing_limit.gpu")

"""Issue 6, rung (b): every compiled Kubernetes object is accepted by a real API server.

A private etcd + kube-apiserver on loopback (:mod:`tests.support.k8sapi`, binaries from
``scripts/build-k8s.sh``, which ``scripts/bootstrap.sh`` runs) gets the CRDs of the
pinned Kueue and Volcano releases; then each example spec's ``kubernetes/*.yaml`` is
server-side applied object by object, and a second look with ``kubectl diff
--server-side`` must find nothing to change: what railyard renders is what the server
stores, so re-applying (a deploy, a drift check) is a no-op.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from railyard.drift.compare import Observed, compare
from railyard.drift.kubernetes import kinds_of, observation
from tests.conftest import EXAMPLES
from tests.support import k8sapi, k8slab

pytestmark = pytest.mark.k8s

SPECS = [p for p in EXAMPLES if (yaml.safe_load(p.read_text()).get("partitions") or {}).get("kubernetes")]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    bin_dir = k8sapi.find_bin_dir()
    if bin_dir is None or not (bin_dir / "kubectl").is_file():
        pytest.fail("etcd, kube-apiserver and kubectl are not built: run scripts/build-k8s.sh "
                    "(scripts/bootstrap.sh does)")
    t0 = time.monotonic()
    with k8sapi.K8sAPI.start(tmp_path_factory.mktemp("k8s")) as server:
        up = time.monotonic() - t0
        crds = k8slab.install_crds(server, [k8slab.CACHE / "crds/kueue", k8slab.CACHE / "crds/volcano"])
        print(f"\nk8s: etcd + kube-apiserver ready in {up:.1f} s; {len(crds)} CRDs in "
              f"{time.monotonic() - t0 - up:.1f} s")
        bad = [f"{r.ref}: {r.message}" for r in crds if not r.ok]
        assert not bad, bad
        yield server


def _established(api) -> set[str]:
    out = k8slab.kubectl(api, "get", "crd", "-o", "json", check=True).stdout
    return {
        c["metadata"]["name"]
        for c in yaml.safe_load(out)["items"]
        if any(s["type"] == "Established" and s["status"] == "True" for s in c["status"]["conditions"])
    }


def test_pinned_crds_are_established(api):
    names = _established(api)
    for crd in ("topologies.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
                "resourceflavors.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io",
                "queues.scheduling.volcano.sh", "hypernodes.topology.volcano.sh", "jobs.batch.volcano.sh"):
        assert crd in names


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.parent.name)
def test_compiled_objects_are_accepted_and_reapply_is_a_no_op(api, spec: Path, tmp_path):
    rendered = k8slab.render(spec, tmp_path / "render")
    files = sorted((rendered / "kubernetes").glob("*.yaml"))
    docs = [d for f in files for d in k8slab.k8s_docs(f)]
    assert {d["kind"] for d in docs} >= {"Topology", "ResourceFlavor", "ClusterQueue", "HyperNode"}
    t0 = time.monotonic()
    results = k8slab.apply_render(api, rendered)
    print(f"\n{spec.parent.name}: {len(results)} objects applied in {time.monotonic() - t0:.1f} s")
    rejected = [f"{r.file} {r.ref}: {r.message}" for r in results if not r.ok]
    assert not rejected, rejected
    for f in files:
        if not k8slab.k8s_docs(f):
            continue
        d = k8slab.kubectl(api, "diff", "--server-side", "--field-manager=railyard", "-f", str(f))
        assert d.returncode == 0, f"{f.name} differs from what the server stored:\n{d.stdout}{d.stderr}"
    _delete(api, files)


def _delete(api, files: list[Path]) -> None:
    """The next spec starts from an empty server (a Topology's levels are immutable).
    Namespaces stay: without kube-controller-manager here one would never finish terminating."""
    docs = [d for f in files for d in k8slab.k8s_docs(f) if d["kind"] != "Namespace"]
    k8slab.kubectl(api, "delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(docs), check=True)


def test_a_hard_network_topology_volcano_job_passes_the_schema(api):
    """Volcano's scheduler cannot be built here (the proxy refuses volcano.sh/apis), so
    placement inside one HyperNode is not proven; the job's shape is, by the server."""
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "tier1", "namespace": "default"},
        "spec": {
            "schedulerName": "volcano",
            "queue": "research",
            "minAvailable": 2,
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
            "tasks": [{
                "name": "worker",
                "replicas": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "w", "image": "localhost/none",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }]}},
            }],
        },
    }
    r = k8slab.kubectl(api, "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(job))
    assert r.returncode == 0, r.stderr
    bad = dict(job, spec={**job["spec"], "networkTopology": {"mode": "strict", "highestTierAllowed": 1}})
    r = k8slab.kubectl(api, "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad))
    assert r.returncode != 0 and "mode" in r.stderr, "the schema must reject an unknown mode"


def test_the_built_kubernetes_is_the_minor_the_lab_spec_pins(api, lab_plan):
    out = subprocess.run([k8slab.kubectl_bin(api), "version", "--client", "-o", "json"],
                         capture_output=True, text=True, check=True).stdout
    built = yaml.safe_load(out)["clientVersion"]["gitVersion"]
    assert built == k8sapi.K8S_VERSION
    assert built.startswith(f"v{lab_plan.spec.cluster.versions.kubernetes}."), built


def test_drift_reads_the_applied_objects_back_as_clean_and_sees_an_edit(api, lab_plan, tmp_path):
    """The drift kubernetes layer on what a real server returns: the applied plan is
    clean, and a quota edited by hand is found (nodes are not registered here, so only
    object findings count)."""
    spec = next(p for p in SPECS if p.parent.name == "lab")
    rendered = k8slab.render(spec, tmp_path / "render")
    assert all(r.ok for r in k8slab.apply_render(api, rendered))
    docs = [*lab_plan.kubernetes.kueue, *lab_plan.kubernetes.volcano]

    def observe():
        lists = [yaml.safe_load(k8slab.kubectl(api, "get", k, "-A", "-o", "json", check=True).stdout)
                 for k in kinds_of(docs)]
        return observation({"items": []}, lists)

    def object_findings():
        report = compare(lab_plan, Observed(kubernetes=observe()))
        return [f.message for f in report.findings if f.kind.startswith("object")]

    assert object_findings() == []
    patch = '[{"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota", "value": "8"}]'
    k8slab.kubectl(api, "patch", "clusterqueue.kueue.x-k8s.io", "gpu", "--type=json", "-p", patch, check=True)
    found = object_findings()
    assert len(found) == 1 and "ClusterQueue/gpu" in found[0] and "'8'" in found[0], found
    _delete(api, sorted((rendered / "kubernetes").glob("*.yaml")))


def test_drift_compares_each_workers_capacity_gpus_included(api, lab_plan):
    """The Node capacity drift reads from a real server. The lab's workers run kubelets:
    railyard sets their GPUs (must equal the spec's 2), the kubelet measures CPUs and memory
    (must be at least the spec's 2 CPUs and 1000 MB). No kubelet runs here, so the test
    registers kw1 and kw2 and writes their status as a kubelet and the role would."""
    assert set(lab_plan.kubernetes.agents.values()) == {"kubelet"}

    def status(name: str, capacity: dict[str, str]) -> None:
        doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
               "status": {"capacity": capacity, "allocatable": capacity}}
        k8slab.kubectl(api, "apply", "--server-side", "--field-manager=test", "--force-conflicts",
                       "--subresource=status", "-f", "-", input=json.dumps(doc), check=True)

    def capacity_findings() -> list[str]:
        nodes = yaml.safe_load(k8slab.kubectl(api, "get", "nodes", "-o", "json", check=True).stdout)
        report = compare(lab_plan, Observed(kubernetes=observation(nodes, [])))
        return sorted(f"{f.kind}: {f.message}" for f in report.findings if f.kind.startswith("capacity"))

    for name in ("kw1", "kw2"):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab_plan.kubernetes.labels[name]}}
        k8slab.kubectl(api, "apply", "-f", "-", input=json.dumps(node), check=True)
        # what a kubelet on this 2-core, 24 GiB machine reports, plus the role's GPUs
        status(name, {"cpu": "2", "memory": "24683664Ki", "pods": "110", "nvidia.com/gpu": "2"})
    try:
        assert capacity_findings() == []
        status("kw1", {"cpu": "2", "memory": "24683664Ki", "pods": "110", "nvidia.com/gpu": "0"})  # zeroed
        status("kw2", {"cpu": "1", "memory": "512Mi", "pods": "110", "nvidia.com/gpu": "2"})      # short
        assert capacity_findings() == [
            "capacity_short: kw2 reports cpu 1, less than the spec's 2",
            "capacity_short: kw2 reports memory 512Mi, less than the spec's 1000Mi",
            "capacity_value: kw1: allocatable nvidia.com/gpu is 0, the plan has 2",
            "capacity_value: kw1: capacity nvidia.com/gpu is 0, the plan has 2",
        ]
    finally:
        k8slab.kubectl(api, "delete", "node", "kw1", "kw2", "--ignore-not-found")


def test_drift_reads_node_versions_and_the_apiservers_etcd(api, lab_plan):
    """What a kubelet writes in .status.nodeInfo, read back through kubectl as drift reads
    it, and the probe against the etcd this apiserver stores in (one member, "lab")."""
    from dataclasses import replace

    from railyard.drift.kubernetes import etcd_from_probe, etcd_probe_argv

    runtime = "containerd://1.7.24~ds1"

    def status(name: str, kubelet: str, containerd: str) -> None:
        cap = dict(lab_plan.kubernetes.capacity[name])
        doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
               "status": {"capacity": cap, "allocatable": cap,
                          "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": containerd,
                                       "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                                       "osImage": "", "kubeProxyVersion": "", "operatingSystem": "linux",
                                       "architecture": "amd64"}}}
        k8slab.kubectl(api, "apply", "--server-side", "--field-manager=test", "--force-conflicts",
                       "--subresource=status", "-f", "-", input=json.dumps(doc), check=True)

    # this apiserver's etcd is plain HTTP (tests/support/k8sapi): the probe reads no TLS files for it
    probe = subprocess.run(etcd_probe_argv(api.etcd_url, "", "", ""), capture_output=True, text=True, check=True,
                           timeout=60)
    etcd = etcd_from_probe("kcp1", probe.stdout)
    assert [(m.name, m.client_urls, m.healthy) for m in etcd.members] == [("lab", (api.etcd_url,), True)]

    def version_findings() -> list[tuple[str, str, str]]:
        nodes = yaml.safe_load(k8slab.kubectl(api, "get", "nodes", "-o", "json", check=True).stdout)
        obs = replace(observation(nodes, []), applied_runtimes={"kw1": runtime, "kw2": runtime}, applied_record="r")
        report = compare(lab_plan, Observed(kubernetes=obs))
        assert report.errors == ()
        return sorted((f.subject, f.kind, f.observed) for f in report.findings if "version" in f.kind)

    for name in ("kw1", "kw2"):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab_plan.kubernetes.labels[name]}}
        k8slab.kubectl(api, "apply", "-f", "-", input=json.dumps(node), check=True)
        status(name, "v1.35.4", runtime)
    try:
        assert version_findings() == []
        status("kw1", "v1.35.4", "containerd://2.1.4~ds1")
        status("kw2", "v1.34.2", runtime)
        assert version_findings() == [
            ("kw1", "runtime_version", "containerRuntimeVersion=containerd://2.1.4~ds1"),
            ("kw2", "kubelet_version", "kubeletVersion=v1.34.2"),
        ]
    finally:
        k8slab.kubectl(api, "delete", "node", "kw1", "kw2", "--ignore-not-found")

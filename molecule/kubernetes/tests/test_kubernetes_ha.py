"""The control plane as three nodes: one etcd cluster, an apiserver on each behind every
worker's haproxy, leaders elected, and a node lost and brought back.

Runs after test_kubernetes.py (file order), because it kills a control-plane node; it
starts it again and waits for etcd to have all its members healthy before it ends, so
nothing after it sees a difference. Expectations come from the spec of the molecule
variant (its partitions.kubernetes.control_plane), never from the compiled plan. The
times it measures are written to <artifacts>/../failover.json and printed.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import testinfra
import yaml
from ClusterShell.NodeSet import NodeSet

from tests.support import molecule as support
from tests.support.verify import ARTIFACTS, VARIANT, assert_running, wait

SPEC = support.VARIANTS[VARIANT]()
CONTROL_PLANE = list(NodeSet(SPEC["partitions"]["kubernetes"]["control_plane"]))
WORKERS = list(NodeSet(SPEC["partitions"]["kubernetes"]["workers"]))
# Each node's address as the scenario gives its container (molecule.yml's platforms), not
# as the compiler derived it: tests/test_molecule.py ties the two together.
ADDRESS = {p["name"]: p["ip"] for p in support.interpolated(
    yaml.safe_load((Path(__file__).parents[1] / "molecule.yml").read_text())["platforms"])}
# The spec's first LocalQueue: where the failover job is queued.
QUEUE = SPEC["partitions"]["kubernetes"]["kueue"]["local_queues"][0]
# A worker that runs containers (molecule.yml makes kw1 a KWOK node).
KUBELET_WORKER = "kw2"
ETCDCTL = ("ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
           "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt --key=/etc/kubernetes/pki/etcd/healthcheck-client.key")
# Leases of the components that elect a leader: namespace, name.
LEASES = [("kube-system", "kube-controller-manager"), ("kube-system", "kube-scheduler"),
          ("kueue-system", "c1f6bfd2.kueue.x-k8s.io"), ("volcano-system", "vc-controller-manager"),
          ("volcano-system", "volcano")]
# Five requests, one connection each, through the worker's loopback endpoint, checked
# against the cluster CA as its agent does: each prints "ok" when an apiserver answered.
READYZ = ("python3 -c \"import ssl, urllib.request; c = ssl.create_default_context(cafile='{ca}'); "
          "[print(urllib.request.urlopen('https://127.0.0.1:6443/readyz', context=c, timeout=3).read().decode()) "
          "for _ in range(5)]\"")
WORKER_CA = "/etc/kubernetes/kubelet/pki/ca.crt"
# The Kueue manager's readiness on its node (the role's default kueue_health_port).
KUEUE_READYZ = ("python3 -c \"import urllib.request; "
                "print(urllib.request.urlopen('http://127.0.0.1:8081/readyz', timeout=3).read().decode())\"")


def host(name: str):
    return testinfra.get_host(f"podman://{name}")


def kubectl(on: str, *args: str, stdin: str | None = None, check: bool = True):
    cmd = "kubectl " + " ".join(f"'{a}'" for a in args)
    if stdin is not None:
        cmd = f"cat <<'EOF_RAILYARD' | {cmd}\n{stdin}\nEOF_RAILYARD"
    out = host(on).run(cmd)
    if check and out.rc != 0:
        pytest.fail(f"on {on}: {cmd} -> rc {out.rc}\n{out.stdout}{out.stderr}")
    return out


def members(on: str) -> dict[str, dict]:
    out = host(on).run(f"{ETCDCTL} member list -w json")
    assert out.rc == 0, out.stderr
    return {m.get("name", ""): m for m in json.loads(out.stdout)["members"]}


def health(on: str) -> dict[str, bool]:
    """Each member's client URL -> whether it answers healthy (etcdctl asks every member)."""
    out = host(on).run(f"{ETCDCTL} endpoint health --cluster -w json")
    try:
        return {h["endpoint"]: bool(h.get("health")) for h in json.loads(out.stdout or "[]")}
    except ValueError:
        return {}


def holder(on: str, ns: str, name: str) -> str:
    out = kubectl(on, "get", "lease", name, "-n", ns, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return out.stdout.strip() if out.rc == 0 else ""


def test_the_spec_names_three_control_plane_nodes():
    assert len(CONTROL_PLANE) == 3, CONTROL_PLANE


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_etcd_is_one_cluster_with_a_member_on_each_node(node):
    got = members(node)
    assert sorted(got) == sorted(CONTROL_PLANE), got
    for name, m in got.items():
        assert m["peerURLs"] == [f"https://{ADDRESS[name]}:2380"], m
        assert m["clientURLs"] == [f"https://{ADDRESS[name]}:2379"], m
    assert sorted(health(node).values()) == [True] * len(CONTROL_PLANE), health(node)


def test_etcd_refuses_a_client_without_a_certificate():
    """A client that trusts etcd's CA but shows no certificate is refused in the TLS
    handshake (etcd's client-cert-auth)."""
    out = host(CONTROL_PLANE[0]).run(
        "python3 -c \"import ssl, urllib.request; c = ssl.create_default_context(cafile='/etc/kubernetes/pki/etcd/ca.crt'); "
        "urllib.request.urlopen('https://127.0.0.1:2379/health', context=c, timeout=5)\"")
    assert out.rc != 0, out.stdout
    assert "CERTIFICATE_REQUIRED" in out.stderr.upper().replace(" ", "_"), out.stderr


def test_every_control_plane_node_shares_one_cluster_ca_and_etcd_ca():
    for f in ("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/etcd/ca.crt", "/etc/kubernetes/pki/sa.pub"):
        sums = {n: host(n).run(f"sha256sum {f}").stdout.split()[0] for n in CONTROL_PLANE}
        assert len(set(sums.values())) == 1, (f, sums)
    for n in CONTROL_PLANE:
        for key in ("/etc/etcd/pki/server.key", "/etc/etcd/pki/peer.key"):
            f = host(n).file(key)
            assert (f.mode, f.user) == (0o600, "etcd"), (n, key)


@pytest.mark.parametrize("worker", WORKERS)
def test_each_worker_balances_over_every_apiserver(worker):
    cfg = host(worker).file("/etc/haproxy/haproxy.cfg").content_string
    servers = [ln.split()[1:3] for ln in cfg.splitlines() if ln.strip().startswith("server ")]
    assert servers == [[n, f"{ADDRESS[n]}:6443"] for n in CONTROL_PLANE], servers
    kubeconfigs = host(worker).run("grep -rh 'server:' --include='*kubeconfig' /etc/kubernetes/kubelet /etc/kwok")
    assert kubeconfigs.stdout.strip(), "no kubeconfig on the worker"
    assert {ln.split()[1] for ln in kubeconfigs.stdout.splitlines()} == {"https://127.0.0.1:6443"}, kubeconfigs.stdout


@pytest.mark.parametrize(("ns", "name"), LEASES)
def test_each_component_that_elects_a_leader_holds_its_lease_from_a_control_plane_node(ns, name):
    got = holder(CONTROL_PLANE[0], ns, name)
    assert got.split("_")[0] in CONTROL_PLANE, f"lease {ns}/{name} held by {got!r}"


def _job(name: str) -> str:
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": QUEUE["namespace"], "labels": {"kueue.x-k8s.io/queue-name": QUEUE["name"]}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": KUBELET_WORKER},
            "containers": [{"name": "c", "image": "localhost/railyard/busybox:1", "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "50m", "memory": "32Mi", "nvidia.com/gpu": "1"},
                                          "limits": {"nvidia.com/gpu": "1"}}}]}}},
    })


def _admitted_and_running(on: str, name: str):
    def admitted():
        out = kubectl(on, "get", "workloads", "-n", QUEUE["namespace"], "-o", "json", check=False)
        if out.rc != 0:
            return None
        for w in json.loads(out.stdout)["items"]:
            if any(o["name"] == name for o in w["metadata"].get("ownerReferences", [])):
                return any(c["type"] == "Admitted" and c["status"] == "True" for c in w["status"].get("conditions", []))
        return None

    def running():
        out = kubectl(on, "get", "pods", "-n", QUEUE["namespace"], "-l", f"batch.kubernetes.io/job-name={name}",
                      "-o", "jsonpath={.items[*].status.phase}", check=False)
        return out.rc == 0 and out.stdout.split() == ["Running"]
    return admitted, running


def test_losing_a_control_plane_node_keeps_the_cluster_running_and_it_rejoins():
    """Kill (no shutdown: its leases are not released) the node that holds Kueue's lease,
    so Kueue must fail over to admit anything; then the API answers on the worker's
    endpoint, a survivor's Kueue admits a new job and its pod starts on the real kubelet.
    The node started again rejoins: etcd has its three members healthy, and its own
    apiserver is ready."""
    lost = holder(CONTROL_PLANE[0], "kueue-system", "c1f6bfd2.kueue.x-k8s.io").split("_")[0]
    assert lost in CONTROL_PLANE, lost
    survivor = next(n for n in CONTROL_PLANE if n != lost)
    times: dict[str, float | str | None] = {"lost": lost, "survivor": survivor}
    kubectl(survivor, "delete", "job", "failover", "-n", QUEUE["namespace"], "--ignore-not-found", "--wait=true", check=False)
    t0 = time.monotonic()
    subprocess.run(["podman", "kill", lost], check=True, capture_output=True, timeout=60)
    try:
        # five answers in a row through the worker's haproxy, so not one lucky pick of a live server
        times["api_answers_on_the_worker_s"], _ = wait(
            lambda: host(KUBELET_WORKER).run(READYZ.format(ca=WORKER_CA)).stdout.split() == ["ok"] * 5, 60)
        times["kueue_leader_moved_s"], new = wait(
            lambda: (h := holder(survivor, "kueue-system", "c1f6bfd2.kueue.x-k8s.io").split("_")[0]) != lost and h, 90)
        times["kueue_leader"] = new
        kubectl(survivor, "apply", "-f", "-", stdin=_job("failover"))
        t_job = time.monotonic()
        admitted, running = _admitted_and_running(survivor, "failover")
        admit_s, _ = wait(admitted, 120)
        run_s, _ = wait(running, 120)
        times["job_admitted_after_submit_s"] = admit_s
        times["pod_running_after_submit_s"] = run_s
        times["pod_running_after_loss_s"] = (t_job - t0 + run_s) if run_s is not None else None
        assert times["api_answers_on_the_worker_s"] is not None, times
        assert new and new != lost, times
        assert admit_s is not None and run_s is not None, times
        node = json.loads(kubectl(survivor, "get", "node", KUBELET_WORKER, "-o", "json").stdout)
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready == "True", (KUBELET_WORKER, node["status"]["conditions"])
    finally:
        kubectl(survivor, "delete", "job", "failover", "-n", QUEUE["namespace"], "--ignore-not-found", "--wait=false",
                check=False)
        t1 = time.monotonic()
        subprocess.run(["podman", "start", lost], check=True, capture_output=True, timeout=120)
        # its daemons come back with the node: Kueue, started at boot before its apiserver
        # serves discovery, exits and is started again by systemd (Restart=on-failure) until
        # it does. "active" alone is seen in the two seconds before such an exit: the node
        # has rejoined when the manager's own /readyz answers.
        times["rejoined_healthy_s"], _ = wait(
            lambda: (len(health(survivor)) == len(CONTROL_PLANE) and all(health(survivor).values())
                     and kubectl(lost, "get", "--raw", "/readyz", check=False).stdout.strip() == "ok"
                     and host(lost).run("systemctl is-active etcd kube-apiserver kueue").rc == 0
                     and host(lost).run(KUEUE_READYZ).stdout.strip() == "ok"), 180, step=2)
        times["restart_to_healthy_s"] = time.monotonic() - t1 if times["rejoined_healthy_s"] is not None else None
        times["kueue_restarts_on_rejoin"] = host(lost).run("systemctl show -P NRestarts kueue").stdout.strip()
        (ARTIFACTS.parent / "failover.json").write_text(json.dumps(times, indent=1) + "\n")
        print("control-plane failover:", json.dumps(times))
    assert times["rejoined_healthy_s"] is not None, (times, health(survivor))
    assert sorted(members(lost)) == sorted(CONTROL_PLANE)
    for unit in ("etcd", "kube-apiserver", "kueue"):
        assert_running(host(lost), unit)

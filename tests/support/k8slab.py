"""Try railyard's compiled Kubernetes objects against a real apiserver (issue 6, rung a).

On top of :class:`tests.support.k8sapi.K8sAPI`:

* ``install_crds(api, dirs)``: server-side apply of the pinned Kueue/Volcano CRDs
  (copied out of the module zips by ``scripts/build-k8s.sh crds``), then wait for
  ``Established``.
* ``apply_render(api, render_dir)``: every object in ``render_dir/kubernetes/*.yaml``
  is server-side applied *on its own*, so each gets its own verdict; returns
  ``ApplyResult``s with the apiserver's exact message for a rejection.
* ``kwok_nodes(spec)``: Node objects for the plan's Kubernetes workers with the
  compiled node labels, ``kubernetes.io/hostname`` and the spec's capacity
  (cpu, memory, ``nvidia.com/gpu``), annotated for KWOK to manage.
* ``start_*``: kube-controller-manager, kube-scheduler, the Kueue manager
  (webhook server on 127.0.0.1 with a cert from the lab CA, webhook configurations
  pointed at it by URL; no cert-manager, no internal cert rotation) and KWOK.

``python -m tests.support.k8slab DIR SPEC`` runs the whole try and prints a report;
``python -m tests.support.k8sapi stop DIR`` ends everything it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.k8sapi import K8S_VERSION, K8sAPI, free_port

REPO = Path(__file__).resolve().parents[2]
CACHE = (
    Path(os.environ.get("RAILYARD_K8S_CACHE", str(Path.home() / ".cache/railyard/k8s")))
    / K8S_VERSION
)
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def kubectl_bin(api: K8sAPI) -> str:
    own = api.bin_dir / "kubectl"
    return str(own) if own.is_file() else "kubectl"


def kubectl(
    api: K8sAPI, *args: str, input: str | None = None, check: bool = False, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_bin(api), "--kubeconfig", str(api.kubeconfig), *args],
        input=input,
        text=True,
        capture_output=True,
        check=check,
        timeout=timeout,
    )


@dataclass
class ApplyResult:
    file: str
    ref: str  # kind/namespace/name
    ok: bool
    message: str


def _ref(doc: dict[str, Any]) -> str:
    md = doc.get("metadata") or {}
    ns = md.get("namespace")
    return f"{doc.get('kind')}/{ns + '/' if ns else ''}{md.get('name')}"


def apply_docs(
    api: K8sAPI, docs: list[dict[str, Any]], file: str = "-", manager: str = "railyard"
) -> list[ApplyResult]:
    out = []
    for doc in docs:
        r = kubectl(
            api,
            "apply",
            "--server-side",
            f"--field-manager={manager}",
            "-o",
            "name",
            "-f",
            "-",
            input=yaml.safe_dump(doc),
        )
        msg = (r.stdout + r.stderr).strip()
        out.append(ApplyResult(file, _ref(doc), r.returncode == 0, msg))
    return out


def k8s_docs(path: Path) -> list[dict[str, Any]]:
    """The Kubernetes objects in a YAML file (documents with apiVersion and kind)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if isinstance(d, dict) and "apiVersion" in d and "kind" in d]


def install_crds(api: K8sAPI, dirs: list[Path], timeout: int = 60) -> list[ApplyResult]:
    results = []
    for d in dirs:
        for f in sorted(d.glob("*.yaml")):
            results += apply_docs(api, k8s_docs(f), file=str(f), manager="railyard-lab")
    kubectl(api, "wait", "--for=condition=Established", "crd", "--all", f"--timeout={timeout}s")
    return results


def render(spec: Path, out: Path) -> Path:
    subprocess.run(
        [str(REPO / ".venv/bin/railyard"), "render", str(spec), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


def apply_render(api: K8sAPI, render_dir: Path) -> list[ApplyResult]:
    results = []
    for f in sorted((render_dir / "kubernetes").glob("*.yaml")):
        docs = k8s_docs(f)
        if docs:
            results += apply_docs(api, docs, file=f.name)
    return results


def kwok_nodes(spec: Path, render_dir: Path) -> list[dict[str, Any]]:
    """Nodes for the plan's Kubernetes workers: compiled labels + the spec's capacity."""
    sys.path.insert(0, str(REPO))
    from railyard.compiler import compile as compile_plan
    from railyard.load import load

    plan = compile_plan(load(spec), str(spec))
    labels = yaml.safe_load((render_dir / "kubernetes/node-labels.yaml").read_text()) or {}
    nodes = []
    for name in plan.kubernetes.workers:
        n = plan.node(name)
        hw = n.hardware
        cap = {"cpu": str(hw.cpus), "memory": f"{hw.memory_mb}Mi", "pods": "110"}
        if hw.gpus:
            cap["nvidia.com/gpu"] = str(hw.gpus.count)
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        **labels.get(name, {}),
                        "kubernetes.io/hostname": name,
                        "type": "kwok",
                    },
                    "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "status": {
                    "capacity": cap,
                    "allocatable": cap,
                    "addresses": [{"type": "InternalIP", "address": n.address}],
                },
            }
        )
    return nodes


# -- components -----------------------------------------------------------------------
def _component_flags(api: K8sAPI) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: the lab kubeconfig for
    everything, a loopback port of their own, no leader election."""
    return [
        "--kubeconfig",
        str(api.kubeconfig),
        "--authentication-kubeconfig",
        str(api.kubeconfig),
        "--authorization-kubeconfig",
        str(api.kubeconfig),
        "--authentication-skip-lookup",  # no front-proxy CA in this lab: skip, do not log errors
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        str(free_port()),
        "--leader-elect=false",
    ]


def start_controller_manager(api: K8sAPI) -> None:
    p = api.pki
    api.spawn(
        "kube-controller-manager",
        [
            str(api.bin_dir / "kube-controller-manager"),
            *_component_flags(api),
            "--service-account-private-key-file",
            str(p / "sa.key"),
            "--root-ca-file",
            str(p / "ca.crt"),
            "--use-service-account-credentials=false",
            "--service-cluster-ip-range",
            "10.96.0.0/16",
            "--cert-dir",
            str(api.workdir / "kcm-certs"),
        ],
    )


def start_scheduler(api: K8sAPI) -> None:
    api.spawn(
        "kube-scheduler",
        [
            str(api.bin_dir / "kube-scheduler"),
            *_component_flags(api),
            "--cert-dir",
            str(api.workdir / "scheduler-certs"),
        ],
    )


def start_kwok(api: K8sAPI) -> None:
    stages = CACHE / "manifests/kwok/stages.yaml"
    api.spawn(
        "kwok",
        [
            str(api.bin_dir / "kwok"),
            "--kubeconfig",
            str(api.kubeconfig),
            "--config",
            str(stages),
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr",
            "10.244.0.0/16",
            "--node-lease-duration-seconds",
            "40",
            "--server-address",
            f"127.0.0.1:{free_port()}",
        ],
    )


def start_volcano(api: K8sAPI, render_dir: Path) -> tuple[int, int]:
    """vc-controller-manager and vc-scheduler with the compiled volcano-scheduler.conf
    (network-topology-aware, HyperNodes); returns their healthz ports."""
    ports = []
    for name, extra in (
        ("vc-controller-manager", []),
        ("vc-scheduler", ["--scheduler-conf", str(render_dir / "kubernetes/volcano-scheduler.conf"),
                          "--listen-address", f"127.0.0.1:{free_port()}",
                          "--cache-dump-dir", str(api.workdir)]),
    ):
        hp = free_port()
        ports.append(hp)
        api.spawn(
            name,
            [
                str(api.bin_dir / name),
                "--kubeconfig",
                str(api.kubeconfig),
                "--leader-elect=false",
                "--enable-healthz",
                "--healthz-address",
                f"127.0.0.1:{hp}",
                *extra,
            ],
        )
    return ports[0], ports[1]


def gpu_pod_spec(gpus: int) -> dict[str, Any]:
    """A pod of *gpus* GPUs that KWOK marks Running (its image is never pulled)."""
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "probe",
                "image": "registry.invalid/none:0",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }


def bound_pod(name: str, namespace: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod already bound to *node* (``spec.nodeName``): no scheduler places it and no
    queue admits it, so the GPUs it holds are simply busy for Kueue, kube-scheduler and
    Volcano alike (KWOK marks it Running)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"railyard.test/busy": "true"},
        },
        "spec": {**gpu_pod_spec(gpus), "nodeName": node, "terminationGracePeriodSeconds": 0},
    }


def create_running_pod(api: K8sAPI, pod: dict[str, Any], timeout: float = 60) -> None:
    """Create *pod* and wait until it is Running."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    code, body = api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    if code != 201:
        raise RuntimeError(f"creating Pod {ns}/{name}: {code} {body[:500]}")

    def running() -> bool:
        c, b = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return c == 200 and json.loads(b)["status"].get("phase") == "Running"

    if wait_for(running, timeout, 0.1) is None:
        raise TimeoutError(f"Pod {ns}/{name} not Running after {timeout}s")


def delete_pod(api: K8sAPI, namespace: str, name: str, timeout: float = 60) -> None:
    """Delete a pod at once (grace 0) and wait until it is gone."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    api.request(
        "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    )
    if wait_for(lambda: api.get(path)[0] == 404, timeout, 0.1) is None:
        raise TimeoutError(f"Pod {namespace}/{name} still there after {timeout}s")


def volcano_job(
    name: str,
    namespace: str,
    queue: str,
    pods: int,
    gpus: int = 1,
    tier: int | None = None,
) -> dict[str, Any]:
    """A Volcano Job: one task of *pods* pods of *gpus* GPUs, gang-scheduled (minAvailable
    = *pods*), inside one HyperNode of *tier* or below (networkTopology mode hard)."""
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": queue,
        "minAvailable": pods,
        "tasks": [
            {
                "name": "worker",
                "replicas": pods,
                "template": {"spec": gpu_pod_spec(gpus)},
            }
        ],
    }
    if tier is not None:
        spec["networkTopology"] = {"mode": "hard", "highestTierAllowed": tier}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def volcano_pods(api: K8sAPI, namespace: str, job: str) -> list[dict[str, Any]]:
    sel = f"volcano.sh/job-name={job}"
    return get_json(api, f"/api/v1/namespaces/{namespace}/pods?labelSelector={sel}")["items"]


def kueue_webhooks(api: K8sAPI, port: int, groups: set[str]) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, limited to *groups*, pointed at 127.0.0.1:port by URL."""
    import base64

    ca = base64.b64encode((api.pki / "ca.crt").read_bytes()).decode()
    out = []
    for doc in k8s_docs(CACHE / "manifests/kueue/webhooks.yaml"):
        keep = []
        for wh in doc.get("webhooks", []):
            if not any(
                g in groups for rule in wh.get("rules", []) for g in rule.get("apiGroups", [])
            ):
                continue
            path = wh["clientConfig"]["service"]["path"]
            wh["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            keep.append(wh)
        if keep:
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            doc["webhooks"] = keep
            out.append(doc)
    return out


def start_kueue(api: K8sAPI, webhook_port: int) -> Path:
    certs = api.workdir / "kueue-certs"
    certs.mkdir(exist_ok=True)
    (certs / "tls.crt").write_bytes((api.pki / "webhook.crt").read_bytes())
    (certs / "tls.key").write_bytes((api.pki / "webhook.key").read_bytes())
    cfg = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
    }
    path = api.workdir / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kubectl(api, "create", "namespace", "kueue-system")
    # With internalCertManagement off, kueue v0.17.1 reads the metrics server cert from a
    # hard-coded /etc/kueue/metrics/certs (cmd/kueue/main.go) and exits without it.  Give
    # it one through an overlay on /etc in a private mount namespace: the host's /etc is
    # not touched.
    upper, work = api.workdir / "etc-overlay/upper", api.workdir / "etc-overlay/work"
    (upper / "kueue/metrics/certs").mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (upper / "kueue/metrics/certs" / f).write_bytes((certs / f).read_bytes())
    argv = [
        str(api.bin_dir / "kueue"),
        "--config",
        str(path),
        # the on-demand visibility server reads a hard-coded /visibility/tls.crt and
        # exits the manager without it; it is an aggregated API we do not need here
        "--feature-gates",
        "VisibilityOnDemand=false",
        "--visibility-server-port",
        str(free_port()),
        "--zap-log-level",
        "info",
    ]
    script = (
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc && "
        'exec "$@"'
    )
    api.spawn(
        "kueue",
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "kueue", *argv],
        env={"KUBECONFIG": str(api.kubeconfig)},
    )
    return path


def health_port(cfg_path: Path) -> int:
    return int(
        yaml.safe_load(cfg_path.read_text())["health"]["healthProbeBindAddress"].rsplit(":", 1)[1]
    )


def http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_for(pred, timeout: float, step: float = 0.5) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(step)
    return None


def gpu_job(
    name: str,
    namespace: str,
    queue: str,
    pods: int = 1,
    gpus: int = 1,
    topology: str | None = None,
    required: bool = True,
) -> dict[str, Any]:
    """A batch/v1 Job for Kueue: *pods* pods of *gpus* GPUs each, inside one domain of the
    *topology* level (``podset-required-topology``; ``required=False``: preferred)."""
    kind = "required" if required else "preferred"
    annotations = {f"kueue.x-k8s.io/podset-{kind}-topology": topology} if topology else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": gpu_pod_spec(gpus),
            },
        },
    }


# -- REST helpers (no kubectl process: what is timed is the server, not a client) -------
def get_json(api: K8sAPI, path: str) -> dict[str, Any]:
    code, body = api.get(path)
    if code != 200:
        raise RuntimeError(f"GET {path}: {code} {body[:300]}")
    return json.loads(body)


def submit(api: K8sAPI, job: dict[str, Any]) -> float:
    """Create *job*; returns the monotonic time just before the request went out."""
    ns = job["metadata"]["namespace"]
    t0 = time.monotonic()
    code, body = api.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    if code != 201:
        raise RuntimeError(f"creating Job {ns}/{job['metadata']['name']}: {code} {body[:500]}")
    return t0


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def workload_of(api: K8sAPI, namespace: str, job: str) -> dict[str, Any] | None:
    """The Kueue Workload that a Job owns, or None."""
    items = get_json(api, f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads")
    for w in items["items"]:
        refs = w["metadata"].get("ownerReferences") or []
        if any(r.get("kind") == "Job" and r.get("name") == job for r in refs):
            return w
    return None


def admitted(w: dict[str, Any] | None) -> bool:
    return (condition(w, "Admitted") or {}).get("status") == "True"


def pods_of(api: K8sAPI, namespace: str, job: str) -> list[dict[str, Any]]:
    sel = f"batch.kubernetes.io/job-name={job}"
    return get_json(api, f"/api/v1/namespaces/{namespace}/pods?labelSelector={sel}")["items"]


def all_running(pods: list[dict[str, Any]], n: int) -> bool:
    return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)


def delete_job(
    api: K8sAPI, namespace: str, job: str, timeout: float = 60, wait: bool = True
) -> float:
    """Delete *job* and its pods, and (*wait*) until the Job, its Workload and its pods are
    all gone, so the next test starts from free quota.  The pods go with grace 0: there is
    no kubelet to confirm a graceful end, and KWOK's pod-delete stage took 5-60 s here,
    during which the scheduler still counted their GPUs on the node."""
    t0 = time.monotonic()
    api.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    api.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name={job}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
    )
    if not wait:
        return time.monotonic() - t0

    def gone() -> bool:
        code, _ = api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
        return (
            code == 404
            and workload_of(api, namespace, job) is None
            and not pods_of(api, namespace, job)
        )

    if wait_for(gone, timeout, step=0.2) is None:
        raise TimeoutError(
            f"Job {namespace}/{job}, its Workload or pods still there after {timeout}s"
        )
    return time.monotonic() - t0


# -- the whole stack ----------------------------------------------------------------------
STACK_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kubectl",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kueue",
    "vc-scheduler",
    "vc-controller-manager",
)


def missing_binaries(bin_dir: Path | None) -> list[str]:
    return [b for b in STACK_BINARIES if bin_dir is None or not (bin_dir / b).is_file()]


@dataclass
class Stack:
    api: K8sAPI
    spec: Path
    render_dir: Path
    nodes: list[dict[str, Any]]
    applied: list[ApplyResult]  # the compiled objects on the fresh server
    seconds: dict[str, float]
    # the same objects applied again once Kueue runs: through its webhooks, and after its
    # controllers have written to them (a deploy or a drift check after the first)
    reapplied: list[ApplyResult] = field(default_factory=list)

    def compiled(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in k8s_docs(self.render_dir / "kubernetes/kueue.yaml") if d["kind"] == kind]

    @property
    def levels(self) -> list[str]:
        """The compiled Topology's node labels, widest first (spine, su, hostname)."""
        return [lvl["nodeLabel"] for lvl in self.compiled("Topology")[0]["spec"]["levels"]]

    def local_queue(self, cluster_queue: str | None = None) -> tuple[str, str]:
        """(namespace, name) of a LocalQueue, the first one of *cluster_queue* if given."""
        lq = next(
            q
            for q in self.compiled("LocalQueue")
            if cluster_queue in (None, q["spec"]["clusterQueue"])
        )
        return lq["metadata"]["namespace"], lq["metadata"]["name"]

    def gpu_quota(self, cluster_queue: str) -> int:
        cq = next(
            q for q in self.compiled("ClusterQueue") if q["metadata"]["name"] == cluster_queue
        )
        return sum(
            int(r["nominalQuota"])
            for g in cq["spec"]["resourceGroups"]
            for f in g["flavors"]
            for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        )

    def rejected(self, again: bool = False) -> list[str]:
        return [
            f"{r.file} {r.ref}: {r.message}"
            for r in (self.reapplied if again else self.applied)
            if not r.ok
        ]


def ready_nodes(api: K8sAPI) -> int:
    return sum(
        (condition(n, "Ready") or {}).get("status") == "True"
        for n in get_json(api, "/api/v1/nodes")["items"]
    )


def start_stack(
    api: K8sAPI,
    spec: Path,
    render_dir: Path,
    log=lambda _line: None,
    components: bool = True,
) -> Stack:
    """CRDs, the compiled objects of *spec*, kube-controller-manager, kube-scheduler, KWOK
    with the plan's workers as Ready nodes, and Kueue with its webhooks, on a started *api*.

    Raises when a component does not come up (with its log's tail); a rejected compiled
    object is only reported (``Stack.rejected()``, ``Stack.rejected(again=True)``), since
    that is what a test asserts on."""
    t: dict[str, float] = {}
    t0 = time.monotonic()
    crds = install_crds(api, [CACHE / "crds/kueue", CACHE / "crds/volcano"])
    bad = [f"{r.ref} ({r.file}): {r.message}" for r in crds if not r.ok]
    if bad:
        raise RuntimeError("CRDs rejected:\n" + "\n".join(bad))
    t["crds"] = time.monotonic() - t0
    log(f"CRDs: {len(crds)} established in {t['crds']:.1f}s")

    lap = time.monotonic()
    render(spec, render_dir)
    applied = apply_render(api, render_dir)
    t["render_apply"] = time.monotonic() - lap
    for r in applied:
        log(
            f"  {'accepted' if r.ok else 'REJECTED'} {r.file}: {r.ref}"
            + ("" if r.ok else f"\n      {r.message}")
        )
    stack = Stack(api, spec, render_dir, [], applied, t)
    if not components:
        t["total"] = time.monotonic() - t0
        return stack
    missing = missing_binaries(api.bin_dir)
    if missing:
        raise FileNotFoundError(f"not built in {api.bin_dir}: {missing} (run scripts/build-k8s.sh)")

    lap = time.monotonic()
    start_controller_manager(api)
    start_scheduler(api)
    start_kwok(api)
    stack.nodes = kwok_nodes(spec, render_dir)
    bad = [
        f"{r.ref}: {r.message}"
        for r in apply_docs(api, stack.nodes, "kwok-nodes", "railyard-lab")
        if not r.ok
    ]
    if bad:
        raise RuntimeError("KWOK nodes rejected:\n" + "\n".join(bad))
    api._wait("kwok", lambda: ready_nodes(api) == len(stack.nodes), 60)
    t["nodes_ready"] = time.monotonic() - lap
    log(f"{len(stack.nodes)} KWOK nodes Ready in {t['nodes_ready']:.1f}s")

    lap = time.monotonic()
    port = free_port()
    hp = health_port(start_kueue(api, port))
    api._wait("kueue", lambda: http_ok(f"http://127.0.0.1:{hp}/readyz"), 120)
    t["kueue_ready"] = time.monotonic() - lap
    log(f"kueue manager readyz 200 in {t['kueue_ready']:.1f}s")
    hooks = apply_docs(
        api,
        kueue_webhooks(api, port, {"kueue.x-k8s.io", "batch"}),
        "kueue-webhooks",
        "railyard-lab",
    )
    bad = [f"{r.ref}: {r.message}" for r in hooks if not r.ok]
    if bad:
        raise RuntimeError("Kueue webhook configurations rejected:\n" + "\n".join(bad))
    lap = time.monotonic()
    r = kubectl(api, "wait", "--for=condition=Active", "clusterqueue", "--all", "--timeout=60s")
    if r.returncode != 0:
        raise RuntimeError(
            f"ClusterQueues not Active: {r.stdout}{r.stderr}\n{api.log_tail('kueue', 15)}"
        )
    t["queues_active"] = time.monotonic() - lap
    # again, through Kueue's webhooks, after its controllers have written to the objects
    stack.reapplied = apply_render(api, render_dir)
    for r in stack.reapplied:
        if not r.ok:
            log(
                f"  through webhooks: REJECTED {r.ref}: {r.message.splitlines()[0] if r.message else ''}"
            )
    lap = time.monotonic()
    ports = start_volcano(api, render_dir)
    for name, hp in zip(("vc-controller-manager", "vc-scheduler"), ports, strict=True):
        api._wait(name, lambda hp=hp: http_ok(f"http://127.0.0.1:{hp}/healthz"), 60)
    t["volcano_ready"] = time.monotonic() - lap
    log(f"vc-controller-manager and vc-scheduler healthy in {t['volcano_ready']:.1f}s")
    t["total"] = time.monotonic() - t0
    log(f"ClusterQueues Active in {t['queues_active']:.1f}s; stack up in {t['total']:.1f}s")
    return stack


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.k8slab DIR SPEC", file=sys.stderr)
        return 2
    workdir, spec = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    t0 = time.monotonic()
    api = K8sAPI.start(workdir)
    up = {k: round(v, 2) for k, v in api.startup_seconds.items()}
    print(f"apiserver up at {api.server} in {up['total']:.1f}s ({json.dumps(up)})", flush=True)
    print(kubectl(api, "version").stdout.strip(), flush=True)
    components = "--no-components" not in os.environ.get("K8SLAB_FLAGS", "")
    try:
        stack = start_stack(
            api, spec, workdir / "render", log=lambda m: print(m, flush=True), components=components
        )
    except (RuntimeError, TimeoutError, FileNotFoundError) as e:
        print(f"\nstack did not come up: {e}", file=sys.stderr)
        return 1
    if not components:
        return 0
    print(
        kubectl(
            api,
            "get",
            "nodes",
            "-L",
            ",".join(stack.levels[:-1]),
            "-o",
            "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu,"
            "CPU:.status.allocatable.cpu,MEM:.status.allocatable.memory",
        ).stdout
    )
    print(
        kubectl(
            api,
            "get",
            "clusterqueues,localqueues,resourceflavors,topologies,cohorts",
            "-A",
            "-o",
            "wide",
        ).stdout
    )
    ns, queue = stack.local_queue()
    # the narrowest fabric level (the level above kubernetes.io/hostname)
    job = gpu_job("gpu-probe", ns, queue, pods=1, gpus=2, topology=stack.levels[-2])
    t_job = submit(api, job)
    took = wait_for(lambda: admitted(workload_of(api, ns, "gpu-probe")), 90, step=0.05)
    print(f"job {ns}/gpu-probe: Workload Admitted after {took}s")
    took = wait_for(lambda: all_running(pods_of(api, ns, "gpu-probe"), 1), 90, step=0.05)
    print(
        f"job pod Running after {time.monotonic() - t_job:.1f}s"
        if took is not None
        else "job pod NOT running in 90s"
    )
    print(kubectl(api, "get", "workloads,jobs,pods", "-n", ns, "-o", "wide").stdout)
    w = workload_of(api, ns, "gpu-probe") or {}
    print(json.dumps((w.get("status") or {}).get("admission"), indent=1))
    print(
        f"\ntotal {time.monotonic() - t0:.1f}s; stop with: python -m tests.support.k8sapi stop {workdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

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
from dataclasses import dataclass
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
    from railyard.spec import load

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
    # With internalCertManagement off, kueue v0.17.0 reads the metrics server cert from a
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


def test_job(queue_ns: str, queue: str, gpus: int, topology_level: str) -> dict[str, Any]:
    """A batch/v1 Job for Kueue, asking for GPUs inside one topology domain."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "gpu-probe",
            "namespace": queue_ns,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "suspend": True,
            "template": {
                "metadata": {
                    "annotations": {"kueue.x-k8s.io/podset-required-topology": topology_level}
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "probe",
                            "image": "registry.invalid/none:0",
                            "resources": {
                                "requests": {
                                    "cpu": "100m",
                                    "memory": "64Mi",
                                    "nvidia.com/gpu": str(gpus),
                                },
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.k8slab DIR SPEC", file=sys.stderr)
        return 2
    workdir, spec = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    report: dict[str, Any] = {}
    t0 = time.monotonic()
    api = K8sAPI.start(workdir)
    report["apiserver_start_s"] = {k: round(v, 2) for k, v in api.startup_seconds.items()}
    print(
        f"apiserver up at {api.server} in {api.startup_seconds['total']:.1f}s "
        f"({json.dumps(report['apiserver_start_s'])})",
        flush=True,
    )
    print(kubectl(api, "version").stdout.strip(), flush=True)

    crds = install_crds(api, [CACHE / "crds/kueue", CACHE / "crds/volcano"])
    bad = [r for r in crds if not r.ok]
    print(f"CRDs: {len(crds) - len(bad)}/{len(crds)} accepted", flush=True)
    for r in bad:
        print(f"  REJECTED {r.ref} ({r.file}): {r.message}")

    rdir = render(spec, workdir / "render")
    first = apply_render(api, rdir)
    print("\nrailyard render -> server-side apply (fresh cluster, nothing else created):")
    for r in first:
        print(
            f"  {'accepted' if r.ok else 'REJECTED'} {r.file}: {r.ref}"
            + ("" if r.ok else f"\n      {r.message}")
        )
    missing_ns = sorted(
        {
            r.ref.split("/")[1]
            for r in first
            if not r.ok and "namespaces" in r.message and "not found" in r.message
        }
    )
    if missing_ns:
        print(
            f"\n  the compiler renders no Namespace for {missing_ns}; creating them and applying again:"
        )
        for ns in missing_ns:
            kubectl(api, "create", "namespace", ns)
        for r in apply_render(api, rdir):
            if not r.ok or any(f.ref == r.ref and not f.ok for f in first):
                print(
                    f"  {'accepted' if r.ok else 'REJECTED'} {r.file}: {r.ref}"
                    + ("" if r.ok else f"\n      {r.message}")
                )

    if "--no-components" in os.environ.get("K8SLAB_FLAGS", ""):
        return 0
    # controllers, scheduler, KWOK nodes, Kueue
    have = {
        b: (api.bin_dir / b).is_file()
        for b in ("kube-controller-manager", "kube-scheduler", "kwok", "kueue")
    }
    print(f"\nbinaries: {have}")
    if have["kube-controller-manager"]:
        start_controller_manager(api)
    if have["kube-scheduler"]:
        start_scheduler(api)
    if have["kwok"]:
        start_kwok(api)
        for r in apply_docs(api, kwok_nodes(spec, rdir), file="kwok-nodes", manager="railyard-lab"):
            print(f"  {'accepted' if r.ok else 'REJECTED'} {r.ref} {'' if r.ok else r.message}")
        took = wait_for(
            lambda: (
                kubectl(
                    api,
                    "get",
                    "nodes",
                    "-o",
                    "jsonpath={range .items[*]}"
                    "{.status.conditions[?(@.type=='Ready')].status}{' '}{end}",
                )
                .stdout.split()
                .count("True")
                == len(kwok_nodes(spec, rdir))
            ),
            60,
        )
        print(
            f"  KWOK nodes Ready after {took}s"
            if took is not None
            else "  KWOK nodes NOT Ready in 60s"
        )
        print(
            kubectl(
                api,
                "get",
                "nodes",
                "-L",
                "topology.railyard.dev/su,topology.railyard.dev/spine",
                "-o",
                "wide",
            ).stdout
        )
        print(
            kubectl(
                api,
                "get",
                "nodes",
                "-o",
                "custom-columns=NAME:.metadata.name,GPU:.status.allocatable.nvidia\\.com/gpu,"
                "CPU:.status.allocatable.cpu,MEM:.status.allocatable.memory",
            ).stdout
        )
    if have["kueue"]:
        port = free_port()
        cfg_path = start_kueue(api, port)
        pid = int((api.workdir / "kueue.pid").read_text())
        hp = health_port(cfg_path)
        took = wait_for(
            lambda: not Path(f"/proc/{pid}").exists() or http_ok(f"http://127.0.0.1:{hp}/readyz"),
            120,
        )
        if not Path(f"/proc/{pid}").exists():
            print("\nkueue manager EXITED:\n" + api.log_tail("kueue", 15))
            return 1
        print(
            f"\nkueue manager: {f'readyz 200 after {took:.1f}s' if took else 'NOT ready in 120s'}",
            flush=True,
        )
        for r in apply_docs(
            api,
            kueue_webhooks(api, port, {"kueue.x-k8s.io", "batch"}),
            file="kueue-webhooks",
            manager="railyard-lab",
        ):
            print(f"  {'accepted' if r.ok else 'REJECTED'} {r.ref} {'' if r.ok else r.message}")
        # re-apply the compiled objects through Kueue's webhooks now that they are live
        for r in apply_render(api, rdir):
            print(
                f"  through webhooks: {'accepted' if r.ok else 'REJECTED'} {r.ref}"
                + ("" if r.ok else f"\n      {r.message}")
            )
        time.sleep(3)
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
        print(
            kubectl(
                api,
                "get",
                "clusterqueue",
                "gpu",
                "-o",
                "jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{'\\n'}{end}",
            ).stdout
        )
        topo = next(d for d in k8s_docs(rdir / "kubernetes/kueue.yaml") if d["kind"] == "Topology")
        lowest_fabric_level = [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]][-2]
        job = test_job("team-a", "gpu", 2, lowest_fabric_level)
        print("job:", apply_docs(api, [job], file="job", manager="railyard-lab")[0])
        took = wait_for(
            lambda: (
                kubectl(
                    api, "get", "pods", "-n", "team-a", "-o", "jsonpath={.items[*].status.phase}"
                ).stdout.strip()
                in ("Running", "Succeeded")
            ),
            90,
        )
        print(f"job pod Running/Succeeded after {took}s" if took else "job pod NOT running in 90s")
        print(kubectl(api, "get", "workloads,jobs,pods", "-n", "team-a", "-o", "wide").stdout)
        print(
            kubectl(
                api,
                "get",
                "workloads",
                "-n",
                "team-a",
                "-o",
                "jsonpath={range .items[*]}{.status.admission}{'\\n'}{range .status.conditions[*]}"
                "{.type}={.status} {.reason}: {.message}{'\\n'}{end}{end}",
            ).stdout
        )
    print(
        f"\ntotal {time.monotonic() - t0:.1f}s; stop with: python -m tests.support.k8sapi stop {workdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

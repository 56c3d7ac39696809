"""How long the in-process Kubernetes stack takes to come up, and how fast Kueue admits.

    .venv/bin/python benchmarks/k8s_bench.py                          # the lab spec, 10 jobs
    .venv/bin/python benchmarks/k8s_bench.py --spec inventories/dgx-h100/cluster.yaml --jobs 20
    .venv/bin/python benchmarks/k8s_bench.py --roles                  # also: the lab partition by its roles

Starts etcd + kube-apiserver and the stack of ``tests.support.k8slab.start_stack`` (CRDs,
the compiled objects, kube-controller-manager, kube-scheduler, KWOK nodes, Kueue with its
webhooks) under .railyard/bench/k8s/, then creates ``--jobs`` Jobs one after the other
(each: 1 pod, 1 GPU, required inside one SU) and times job created -> Workload Admitted
and -> pod Running, deleting each before the next.  Also a no-op (cached) run of
scripts/build-k8s.sh.  With ``--roles``, also the lab's Kubernetes partition as `pulumi
up` installs it: ``molecule converge -s kubernetes`` (kcp1 + 2 KWOK workers, the four
roles) from new containers, then again (must change nothing).  First-build times are
printed by scripts/build-k8s.sh itself (per component, on a machine without the cache).
Figures only, no pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import k8sapi, k8slab
from tests.support import molecule as mol

BENCH = ROOT / ".railyard" / "bench" / "k8s"
COMPONENTS = "etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kueue kwok crds"


def p90(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.9 * len(xs)) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "inventories/lab/cluster.yaml")
    ap.add_argument("--jobs", type=int, default=10, help="jobs created one after the other")
    ap.add_argument("--roles", action="store_true", help="also time molecule/kubernetes converge, twice")
    args = ap.parse_args()
    missing = k8slab.missing_binaries(k8sapi.find_bin_dir())
    if missing:
        print(f"not built: {missing}; run scripts/build-k8s.sh", file=sys.stderr)
        return 1

    t0 = time.monotonic()
    r = subprocess.run(
        [str(ROOT / "scripts/build-k8s.sh"), *COMPONENTS.split()], check=False, capture_output=True
    )
    print(
        f"scripts/build-k8s.sh, cached (no-op): {time.monotonic() - t0:5.2f} s (rc {r.returncode})"
    )

    if BENCH.exists():
        k8sapi.K8sAPI.stop_dir(BENCH)
        shutil.rmtree(BENCH)
    with k8sapi.K8sAPI.start(BENCH) as api:
        up = api.startup_seconds
        print(
            f"etcd + kube-apiserver:                {up['total']:5.2f} s "
            f"(pki {up['pki']:.2f}, etcd {up['etcd']:.2f}, apiserver {up['kube-apiserver']:.2f})"
        )
        stack = k8slab.start_stack(api, args.spec.resolve(), BENCH / "render")
        s = stack.seconds
        print(f"CRDs applied + Established:           {s['crds']:5.2f} s")
        print(f"render + apply compiled objects:      {s['render_apply']:5.2f} s")
        print(
            f"{len(stack.nodes):>3} KWOK nodes Ready (incl. kcm, sched): {s['nodes_ready']:5.2f} s"
        )
        print(f"Kueue manager readyz:                 {s['kueue_ready']:5.2f} s")
        print(f"ClusterQueues Active:                 {s['queues_active']:5.2f} s")
        print(f"full stack (after apiserver):         {s['total']:5.2f} s")

        ns, queue = stack.local_queue()
        su = next(lvl for lvl in stack.levels if lvl.endswith("/su"))
        admit, run = [], []
        for i in range(args.jobs):
            name = f"bench-{i}"
            t_job = k8slab.submit(api, k8slab.gpu_job(name, ns, queue, pods=1, gpus=1, topology=su))
            k8slab.wait_for(
                lambda n=name: k8slab.admitted(k8slab.workload_of(api, ns, n)), 60, 0.02
            )
            admit.append(time.monotonic() - t_job)
            k8slab.wait_for(
                lambda n=name: k8slab.all_running(k8slab.pods_of(api, ns, n), 1), 60, 0.02
            )
            run.append(time.monotonic() - t_job)
            k8slab.delete_job(api, ns, name)
        for what, xs in (
            ("job created -> Workload Admitted", admit),
            ("job created -> pod Running", run),
        ):
            print(
                f"{what:<34}: median {statistics.median(xs):5.2f} s, p90 {p90(xs):5.2f} s, "
                f"max {max(xs):5.2f} s over {len(xs)} jobs"
            )
    if args.roles:
        roles_bring_up()
    return 0


def roles_bring_up() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from converge_bench import changed, molecule

    reason = mol.podman_available()
    if reason:
        print(f"roles: skipped: {reason}")
        return
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    mol.prepare("lab")
    try:
        molecule("destroy", ROOT, "kubernetes", env)
        t_create, _ = molecule("create", ROOT, "kubernetes", env)
        t1, out1 = molecule("converge", ROOT, "kubernetes", env)
        t2, out2 = molecule("converge", ROOT, "kubernetes", env)
    finally:
        molecule("destroy", ROOT, "kubernetes", env)
        mol.clean()
    print(f"roles, 3 containers created:          {t_create:5.1f} s")
    print(f"roles, first converge:                {t1:5.1f} s ({changed(out1)} changed)")
    print(f"roles, second converge:               {t2:5.1f} s ({changed(out2)} changed)")


if __name__ == "__main__":
    raise SystemExit(main())

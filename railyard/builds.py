"""The Kubernetes-side releases railyard can install, because scripts/build-k8s.sh builds
them here from the Go module proxy: the one place that says which.

The Kueue and Volcano roles copy these builds from the machine that runs Ansible, on every
cluster; the lab's control plane and kubelets are these builds too. The proxy this machine
reaches serves Kueue 0.17.0, 0.17.1, 0.18.1 and 0.19.x but refuses 0.17.2 to 0.17.7 and
0.18.0 (403); 0.17.1 is the first with the fix for followers' stale Workload caches in HA
(kubernetes-sigs/kueue#10521: a new leader admitted nothing, counting quota of Workloads
deleted while it followed). It refuses Volcano 1.15.x (403), and Volcano
1.14.1 builds against volcano.sh/apis 1.14.0 (the proxy has no apis 1.14.1). So a spec
that names another release is refused by validate (railyard.compiler.validate), not by a
role half-way through an install. scripts/build-k8s.sh reads its default versions from the
assignments below: keep each one a plain ``NAME = "x.y.z"`` line.
"""

from __future__ import annotations

KUBERNETES = "1.35.4"
KUEUE = "0.17.1"
VOLCANO = "1.14.1"
VOLCANO_APIS = "1.14.0"
KWOK = "0.8.0"
# The cluster DNS (kube-system/coredns), built with the plugins its Corefile uses.
COREDNS = "1.14.7"


def kubernetes_minor() -> str:
    """``1.35``: the form of ``cluster.versions.kubernetes``."""
    return KUBERNETES.rsplit(".", 1)[0]

#!/usr/bin/env bash
# Start/stop a private etcd + kube-apiserver on 127.0.0.1 with its state in DIR.
#
#   scripts/lab-k8s-apiserver.sh start DIR    # prints server= and kubeconfig=
#   kubectl --kubeconfig DIR/kubeconfig get ns
#   scripts/lab-k8s-apiserver.sh stop DIR
#
# Binaries: scripts/build-k8s.sh (RAILYARD_K8S_BIN / K8S_VERSION pick which).
# The work is done by tests/support/k8sapi.py, which the tests use as well.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$ROOT/.venv/bin/python
[[ -x $PY ]] || PY=python3
[[ $# -eq 2 ]] || { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
mkdir -p "$2"
cd "$ROOT" && exec "$PY" -m tests.support.k8sapi "$1" "$(cd "$2" && pwd)"

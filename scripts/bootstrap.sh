#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs, idempotent; `make test` and `make lab` call it.
#
#   scripts/bootstrap.sh            # all of it
#   RAILYARD_SKIP="pulumi image" scripts/bootstrap.sh   # leave parts out (developer speed-ups)
#
# Parts: apt (test tools), venv (pinned Python deps + railyard), slurm (Debian's Slurm
# daemons for the real-scheduler tests), podman (runtime for the lab and molecule),
# image (the lab node image), vendor (Enroot and Pyxis .debs built in that image from
# ../shared/vendor/ for the lab and molecule, and the Enroot image busybox.sqsh built from
# Debian's busybox-static), pulumi (the engine, built from the Go module proxy),
# k8s (Debian's etcd; kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# Kueue and KWOK built from the Go module proxy once, then cached; the pinned Kueue and
# Volcano CRDs and manifests: for the lab's Kubernetes partition and its tests).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
SKIP=" ${RAILYARD_SKIP:-} "
export DEBIAN_FRONTEND=noninteractive

step() { printf '\n==> %s\n' "$*" >&2; }
wanted() { [[ $SKIP != *" $1 "* ]]; }
timed() { local t0=$SECONDS; "$@"; printf '    (%ss)\n' $((SECONDS - t0)) >&2; }

apt_install() {
    local missing=()
    for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg"); done
    ((${#missing[@]})) || return 0
    if [[ ! -e /var/lib/apt/periodic/railyard-updated ]] || find /var/lib/apt/lists -maxdepth 0 -mmin +720 | grep -q .; then
        apt-get update -qq && mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/railyard-updated
    fi
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if wanted apt; then
    step "apt: test tools (graphviz for topology pictures, systemd for systemd-escape/analyze, sshpass-free ssh client, openssl for the k8s test PKI)"
    timed apt_install graphviz systemd openssh-client util-linux openssl
fi

if wanted venv; then
    step "venv: pinned Python dependencies and railyard (editable)"
    if [[ ! -x .venv/bin/python ]]; then "$PYTHON" -m venv .venv; fi
    stamp=.venv/.requirements.sha256
    want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
        timed .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
        .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
        echo "$want" > "$stamp"
    fi
fi

if wanted slurm; then
    step "slurm: Debian 12's Slurm daemons (started by the tests, not as services)"
    timed scripts/setup-slurm-host.sh
fi

if wanted podman; then
    step "podman: runtime for the lab and molecule (runc, ulimits)"
    timed scripts/setup-podman.sh
fi

if wanted image; then
    step "image: the lab node image (cached by recipe)"
    timed .venv/bin/railyard lab image
fi

if wanted vendor; then
    step "vendor: Enroot and Pyxis .debs from the vendored release archives, built in the node image against its Slurm (cached)"
    timed scripts/build-vendor.sh
    step "vendor: the Enroot container image from Debian's busybox-static (cached)"
    timed scripts/build-container-image.sh
fi

if wanted pulumi; then
    step "pulumi: the engine (built from the Go module proxy on first use, then cached)"
    bin=$(scripts/install-pulumi.sh | sed -n 's/^PULUMI_BIN=//p')
    ln -sfn "$bin" .venv/pulumi-bin
    echo "    engine: $("$bin/pulumi" version)" >&2
fi

if wanted k8s; then
    step "k8s: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, Kueue, KWOK, Volcano, their CRDs, the kubelet's image (Go module proxy and Debian on first use, then cached)"
    timed scripts/build-k8s.sh >/dev/null   # its default components
fi

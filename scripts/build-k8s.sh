#!/usr/bin/env bash
# Build the Kubernetes-partition lab binaries from the Go module proxy (issue 6).
#
#   scripts/build-k8s.sh                 # default components, see below
#   scripts/build-k8s.sh kube-apiserver etcd
#   export PATH="$(scripts/build-k8s.sh --print-bin):$PATH"
#
# Output: ${RAILYARD_K8S_CACHE:-~/.cache/railyard/k8s}/<K8S_VERSION>/bin
#         .../crds/{kueue,volcano}/*.yaml  (CRDs copied from the module zips)
#         .../manifests/kueue/{webhooks,controller_manager_config,manager-role}.yaml, manifests/kwok/{stages,role}.yaml,
#         manifests/volcano/roles.yaml (the scheduler's and the controllers' ClusterRoles),
#         images/busybox.tar (localhost/railyard/busybox:1, for real kubelets: see build_images)
# Cached: a component whose binary and stamp (.stamp-<name>, holding the version it
# was built from) are present is not touched, so a second run makes no network call
# and returns at once.  A component the proxy refuses is remembered in
# .refused-<name> (delete it to ask again); refusals go to $RAILYARD_K8S_NOTES
# (default /tmp/k8s-notes.md) with the exact `go` error text.
#
# How: k8s.io/kubernetes' go.mod replaces every k8s.io staging module with
# ./staging/src/..., which the module zip does not carry, so neither `go install
# pkg@version` nor a plain require works.  A wrapper module generated in the cache
# dir (never in the repo) requires k8s.io/kubernetes vX.Y.Z and replaces each
# staging module (the list is read from that version's go.mod) by k8s.io/<m> v0.Y.Z.
# Kueue and KWOK have no replace directives: `go install pkg@version` works.  etcd
# comes from Debian's etcd-server package (apt-get download + dpkg-deb -x: nothing is
# installed, no service started) unless ETCD_SOURCE=go.
#
# Be gentle: every build runs under `nice -n 19` with `-p=1` (override GO_P).
set -euo pipefail

# Default releases: railyard/builds.py, the one place that says what railyard installs
# (validate refuses a spec that names another).
builds_py=$(cd "$(dirname "$0")/.." && pwd)/railyard/builds.py
build_of() { sed -n "s/^$1 = \"\([0-9.]*\)\"\$/\1/p" "$builds_py"; }
K8S_VERSION=${K8S_VERSION:-v$(build_of KUBERNETES)}
KUEUE_VERSION=${KUEUE_VERSION:-v$(build_of KUEUE)}
KWOK_VERSION=${KWOK_VERSION:-v$(build_of KWOK)}
VOLCANO_VERSION=${VOLCANO_VERSION:-v$(build_of VOLCANO)}
COREDNS_VERSION=${COREDNS_VERSION:-v$(build_of COREDNS)}
# volcano.sh/volcano replaces volcano.sh/apis by ./staging/..., which its module zip does
# not carry: the build requires volcano.sh/apis at this version instead. The proxy serves
# apis v1.13.0 and v1.14.0 (not v1.14.1, v1.15.x); VOLCANO_VERSION=v1.14.1
# VOLCANO_APIS_VERSION=v1.14.0 builds (692 s on 2 busy cores).
VOLCANO_APIS_VERSION=${VOLCANO_APIS_VERSION:-v$(build_of VOLCANO_APIS)}
for v in K8S_VERSION KUEUE_VERSION KWOK_VERSION VOLCANO_VERSION VOLCANO_APIS_VERSION COREDNS_VERSION; do
    [[ ${!v} =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { printf 'build-k8s: ERROR: %s is "%s", not vX.Y.Z (railyard/builds.py)\n' "$v" "${!v}" >&2; exit 1; }
done
ETCD_SOURCE=${ETCD_SOURCE:-apt}          # apt | go
ETCD_GO_VERSION=${ETCD_GO_VERSION:-v3.6.16}
GO_P=${GO_P:-1}
CACHE=${RAILYARD_K8S_CACHE:-$HOME/.cache/railyard/k8s}
ROOT=$CACHE/$K8S_VERSION
BIN=$ROOT/bin
LOGS=$ROOT/logs
NOTES=${RAILYARD_K8S_NOTES:-/tmp/k8s-notes.md}
DEFAULT_COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kueue kwok crds volcano images coredns"

log() { printf 'build-k8s: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ ${1:-} == --print-bin ]]; then printf '%s\n' "$BIN"; exit 0; fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,25p' "$0"; exit 0; fi
COMPONENTS=${*:-$DEFAULT_COMPONENTS}

mkdir -p "$BIN" "$LOGS"

# --- cache ------------------------------------------------------------------------
stamp_of() { cat "$BIN/.stamp-$1" 2>/dev/null || true; }
is_cached() {  # name want [file...]
    local name=$1 want=$2 f; shift 2
    [[ $(stamp_of "$name") == "$want" ]] || return 1
    for f in "$@"; do [[ -e $f ]] || return 1; done
}
set_stamp() { printf '%s\n' "$2" >"$BIN/.stamp-$1"; }

# --- notes: every refusal, verbatim -------------------------------------------------
note_refusal() {  # name what logfile
    local name=$1 what=$2 logf=$3 lines
    lines=$(grep -E '403|404|410|not available|not found|unknown revision|invalid version|no matching versions|cannot find module|missing go.sum' "$logf" | awk '!seen[$0]++' | head -n 20 || true)
    [[ -n $lines ]] || lines=$(tail -n 15 "$logf")
    {
        [[ -s $NOTES ]] || printf '# k8s build notes (scripts/build-k8s.sh)\n\n'
        printf '## %s: %s (%s)\n\n```\n%s\n```\n\n' "$name" "$what" "$(date -u +%FT%TZ)" "$lines"
    } >>"$NOTES"
    printf '%s\n' "$lines" >"$BIN/.refused-$name"
}
proxy_refused() { grep -qE '403 Forbidden|404 Not Found|410 Gone|not available|unknown revision|invalid version' "$1"; }

# --- go ------------------------------------------------------------------------------
GO=""
find_go() {
    [[ -n $GO ]] && return 0
    GO=$(command -v go || true)
    [[ -n $GO ]] || { [[ -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go; }
    [[ -n $GO ]] || die "no go on PATH nor at /usr/local/go/bin/go"
    local flags
    flags=$("$GO" env GOFLAGS)
    [[ " $flags " == *" -mod="* ]] || flags="${flags:+$flags }-mod=mod"
    [[ " $flags " == *" -p="* ]] || flags="$flags -p=$GO_P"
    export GOFLAGS=$flags CGO_ENABLED=${CGO_ENABLED:-0}
}
gorun() { nice -n 19 "$GO" "$@"; }

# ldflags that make the binaries report the real version (kubectl skew checks, Kueue's
# and KWOK's discovery of the server version all read it).
k8s_ldflags() {
    local v=$K8S_VERSION major minor
    major=${v#v}; major=${major%%.*}
    minor=${v#v*.}; minor=${minor%%.*}
    local f="-s -w" p
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f="$f -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    done
    printf '%s' "$f"
}

K8S_WRAPPER=$ROOT/src/k8s
k8s_wrapper() {  # creates $K8S_WRAPPER/go.mod once per version
    [[ -f $K8S_WRAPPER/.ready ]] && return 0
    find_go
    mkdir -p "$K8S_WRAPPER"
    local logf=$LOGS/k8s-wrapper.log gomod staging sv
    sv="v0.${K8S_VERSION#v1.}"
    log "k8s.io/kubernetes $K8S_VERSION: reading its go.mod (staging modules -> $sv)"
    if ! (cd "$K8S_WRAPPER" && gorun mod download -json "k8s.io/kubernetes@$K8S_VERSION") >"$logf" 2>&1; then
        note_refusal k8s "go mod download k8s.io/kubernetes@$K8S_VERSION" "$logf"
        die "k8s.io/kubernetes@$K8S_VERSION refused, see $NOTES"
    fi
    gomod=$(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d.get("GoMod",""))' <"$logf" 2>/dev/null || true)
    [[ -f $gomod ]] || die "no go.mod for k8s.io/kubernetes@$K8S_VERSION (see $logf)"
    staging=$(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/.*#\1#p' "$gomod" | sort -u)
    [[ -n $staging ]] || die "no staging replaces found in $gomod"
    {
        printf 'module railyard.invalid/k8sbuild\n\ngo %s\n\n' "$(sed -n 's/^go //p' "$gomod")"
        printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
        local m; for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$sv"; done
        printf ')\n'
    } >"$K8S_WRAPPER/go.mod"
    log "wrapper go.mod: $(wc -l <"$K8S_WRAPPER/go.mod") lines, $(wc -w <<<"$staging") staging replaces"
    touch "$K8S_WRAPPER/.ready"
}

build_k8s_cmd() {  # name  (k8s.io/kubernetes/cmd/<name>)
    local name=$1 want="k8s.io/kubernetes@$K8S_VERSION" logf=$LOGS/$1.log
    is_cached "$name" "$want" "$BIN/$name" && return 0
    find_go; k8s_wrapper
    log "$name: go get + go build k8s.io/kubernetes/cmd/$name@$K8S_VERSION (log: $logf)"
    if ! (cd "$K8S_WRAPPER" && gorun get "k8s.io/kubernetes/cmd/$name@$K8S_VERSION" &&
          gorun build -trimpath -ldflags "$(k8s_ldflags)" -o "$BIN/$name.tmp" "k8s.io/kubernetes/cmd/$name") >"$logf" 2>&1; then
        proxy_refused "$logf" && note_refusal "$name" "k8s.io/kubernetes/cmd/$name@$K8S_VERSION" "$logf"
        tail -n 20 "$logf" >&2; return 1
    fi
    mv -f "$BIN/$name.tmp" "$BIN/$name"; set_stamp "$name" "$want"
}

go_install() {  # name pkg@version binary-basename
    local name=$1 pkgv=$2 base=$3 want=$2 logf=$LOGS/$1.log
    is_cached "$name" "$want" "$BIN/$name" && return 0
    find_go
    log "$name: go install $pkgv (log: $logf)"
    if ! (cd "$ROOT" && GOBIN=$ROOT/gobin gorun install -trimpath -ldflags "-s -w" "$pkgv") >"$logf" 2>&1; then
        proxy_refused "$logf" && note_refusal "$name" "go install $pkgv" "$logf"
        tail -n 20 "$logf" >&2; return 1
    fi
    mv -f "$ROOT/gobin/$base" "$BIN/$name"; set_stamp "$name" "$want"
}

build_etcd() {
    local want logf=$LOGS/etcd.log tmp ver
    if [[ $ETCD_SOURCE == apt ]]; then
        # cached: no apt-cache call (0.7 s); rm the stamp to pick up a newer package
        [[ $(stamp_of etcd) == apt:etcd-server=* && -x $BIN/etcd ]] && return 0
        ver=$(apt-cache policy etcd-server 2>/dev/null | sed -n 's/^ *Candidate: //p')
        if [[ -n $ver && $ver != "(none)" ]]; then
            want="apt:etcd-server=$ver"
            is_cached etcd "$want" "$BIN/etcd" && return 0
            tmp=$(mktemp -d)
            log "etcd: apt-get download etcd-server=$ver (extracted, not installed)"
            if (cd "$tmp" && apt-get download "etcd-server=$ver" && dpkg-deb -x etcd-server_*.deb x) >"$logf" 2>&1 \
                && [[ -x $tmp/x/usr/bin/etcd ]]; then
                install -m 0755 "$tmp/x/usr/bin/etcd" "$BIN/etcd"; rm -rf "$tmp"
                set_stamp etcd "$want"; return 0
            fi
            rm -rf "$tmp"; log "etcd: apt download failed ($(tail -n1 "$logf")); building from Go"
        else
            log "etcd: apt has no etcd-server candidate (run apt-get update?); building from Go"
        fi
    fi
    want="go.etcd.io/etcd/server/v3@$ETCD_GO_VERSION"
    is_cached etcd "$want" "$BIN/etcd" && return 0
    find_go
    # etcd's server/go.mod replaces its sibling modules with ../api etc.: wrapper module.
    local w=$ROOT/src/etcd
    mkdir -p "$w"
    printf 'module railyard.invalid/etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_GO_VERSION" >"$w/go.mod"
    log "etcd: go build go.etcd.io/etcd/server/v3@$ETCD_GO_VERSION (log: $logf)"
    if ! (cd "$w" && gorun get "go.etcd.io/etcd/server/v3@$ETCD_GO_VERSION" &&
          gorun build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3) >"$logf" 2>&1; then
        proxy_refused "$logf" && note_refusal etcd "go.etcd.io/etcd/server/v3@$ETCD_GO_VERSION" "$logf"
        tail -n 20 "$logf" >&2; return 1
    fi
    mv -f "$BIN/etcd.tmp" "$BIN/etcd"; set_stamp etcd "$want"
}

build_volcano() {  # scheduler + controller-manager, through a wrapper that repeats volcano's replaces
    local want="volcano.sh/volcano@$VOLCANO_VERSION" logf=$LOGS/volcano.log w=$ROOT/src/volcano dir
    is_cached volcano "$want" "$BIN/vc-scheduler" "$BIN/vc-controller-manager" && return 0
    if [[ -f $BIN/.refused-volcano ]]; then
        log "volcano: refused earlier by the proxy (rm $BIN/.refused-volcano to retry):"
        sed 's/^/    /' "$BIN/.refused-volcano" >&2; return 2
    fi
    find_go
    mkdir -p "$w"
    if ! (cd "$w" && gorun mod download -json "$want") >"$logf" 2>&1; then
        note_refusal volcano "go mod download $want" "$logf"; return 2
    fi
    dir=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("Dir",""))' <"$logf")
    {
        printf 'module railyard.invalid/volcanobuild\n\ngo %s\n\nrequire volcano.sh/volcano %s\n\n' \
            "$(sed -n 's/^go //p' "$dir/go.mod")" "$VOLCANO_VERSION"
        # repeat the non-local replaces; the local one (volcano.sh/apis => ./staging/...)
        # is not in the module zip, so require volcano.sh/apis at the same version.
        sed -n '/^replace (/,/^)/p' "$dir/go.mod" | grep -v '=> \./'
    } >"$w/go.mod"
    log "volcano: go get + build volcano.sh/volcano/cmd/{scheduler,controller-manager}@$VOLCANO_VERSION (log: $logf)"
    if ! (cd "$w" && gorun get "volcano.sh/apis@$VOLCANO_APIS_VERSION" "volcano.sh/volcano/cmd/scheduler@$VOLCANO_VERSION" &&
          gorun build -trimpath -ldflags "-s -w" -o "$BIN/vc-scheduler" volcano.sh/volcano/cmd/scheduler &&
          gorun build -trimpath -ldflags "-s -w" -o "$BIN/vc-controller-manager" volcano.sh/volcano/cmd/controller-manager) >>"$logf" 2>&1; then
        if proxy_refused "$logf"; then note_refusal volcano "build $want" "$logf"; return 2; fi
        tail -n 20 "$logf" >&2; return 1
    fi
    set_stamp volcano "$want"
}

# The one image a real kubelet in the lab needs (no registry serves images here): Debian's
# busybox-static in an otherwise empty image, the pods' workload and, as it sleeps until
# killed, their sandbox ("pause") too. Saved as a docker archive for `ctr images import`.
IMAGE_REF=${IMAGE_REF:-localhost/railyard/busybox:1}
build_images() {
    local ver want logf=$LOGS/images.log tmp
    ver=$(apt-cache policy busybox-static 2>/dev/null | sed -n 's/^ *Candidate: //p')
    [[ -n $ver && $ver != "(none)" ]] || { log "images: apt has no busybox-static candidate (apt-get update?)"; return 1; }
    want="$IMAGE_REF busybox-static=$ver"
    is_cached images "$want" "$ROOT/images/busybox.tar" && return 0
    command -v podman >/dev/null || { log "images: needs podman to build $IMAGE_REF"; return 1; }
    tmp=$(mktemp -d)
    log "images: $IMAGE_REF from busybox-static=$ver (log: $logf)"
    if ! (cd "$tmp" && apt-get download "busybox-static=$ver" && dpkg-deb -x busybox-static_*.deb x &&
          cp x/bin/busybox . &&
          printf '%s\n' 'FROM scratch' 'COPY busybox /bin/busybox' 'RUN ["/bin/busybox", "--install", "-s", "/bin"]' \
              'CMD ["/bin/sleep", "infinity"]' >Containerfile &&
          podman build -q -t "$IMAGE_REF" . &&
          mkdir -p "$ROOT/images" && rm -f "$ROOT/images/busybox.tar" &&
          podman save --format docker-archive -o "$ROOT/images/busybox.tar" "$IMAGE_REF") >"$logf" 2>&1; then
        rm -rf "$tmp"; tail -n 5 "$logf" >&2; return 1
    fi
    rm -rf "$tmp"
    set_stamp images "$want"
}

# The cluster DNS: CoreDNS with the plugins of the Corefile roles/k8s_control_plane writes
# (a main package of our own over coremain, as CoreDNS documents for a custom plugin set:
# the stock one links every plugin and their cloud SDKs), in an image of its own
# (localhost/railyard/coredns:<version>, images/coredns.tar), as the kube-system/coredns
# Deployment runs it on a real kubelet. A site pulls registry.k8s.io/coredns/coredns.
COREDNS_PLUGINS="cache errors forward health kubernetes loadbalance log loop metrics ready reload"
build_coredns() {
    local want="github.com/coredns/coredns@$COREDNS_VERSION plugins:${COREDNS_PLUGINS// /,}" logf=$LOGS/coredns.log
    local w=$ROOT/src/coredns ref="localhost/railyard/coredns:${COREDNS_VERSION#v}" tmp p
    is_cached coredns "$want" "$BIN/coredns" "$ROOT/images/coredns.tar" && return 0
    if [[ -f $BIN/.refused-coredns ]]; then
        log "coredns: refused earlier by the proxy (rm $BIN/.refused-coredns to retry):"
        sed 's/^/    /' "$BIN/.refused-coredns" >&2; return 2
    fi
    command -v podman >/dev/null || { log "coredns: needs podman to build $ref"; return 1; }
    find_go
    mkdir -p "$w"
    {
        printf 'package main\n\nimport (\n'
        for p in $COREDNS_PLUGINS; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
        printf '\n\t"github.com/coredns/coredns/coremain"\n)\n\nfunc main() { coremain.Run() }\n'
    } >"$w/main.go"
    printf 'module railyard.invalid/corednsbuild\n\ngo 1.25\n\nrequire github.com/coredns/coredns %s\n' \
        "$COREDNS_VERSION" >"$w/go.mod"
    log "coredns: go build github.com/coredns/coredns@$COREDNS_VERSION with $COREDNS_PLUGINS (log: $logf)"
    if ! (cd "$w" && gorun build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
              -o "$BIN/coredns.tmp" .) >"$logf" 2>&1; then
        if proxy_refused "$logf"; then note_refusal coredns "build $want" "$logf"; return 2; fi
        tail -n 20 "$logf" >&2; return 1
    fi
    mv -f "$BIN/coredns.tmp" "$BIN/coredns"
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && cp "$BIN/coredns" . &&
          printf '%s\n' 'FROM scratch' 'COPY coredns /coredns' 'ENTRYPOINT ["/coredns"]' >Containerfile &&
          podman build -q -t "$ref" . &&
          mkdir -p "$ROOT/images" && rm -f "$ROOT/images/coredns.tar" &&
          podman save --format docker-archive -o "$ROOT/images/coredns.tar" "$ref") >>"$logf" 2>&1; then
        rm -rf "$tmp"; tail -n 5 "$logf" >&2; return 1
    fi
    rm -rf "$tmp"
    set_stamp coredns "$want"
}

copy_crds() {  # Kueue's and Volcano's CRD YAMLs from their module zips
    local want="kueue@$KUEUE_VERSION volcano@$VOLCANO_VERSION kwok@$KWOK_VERSION manifests:kueue-rbac+secrets,kwok-rbac,volcano-jobflow+rbac" logf=$LOGS/crds.log d
    is_cached crds "$want" "$ROOT/crds/kueue" && return 0
    find_go
    rm -rf "$ROOT/crds" "$ROOT/manifests"; mkdir -p "$ROOT/crds/kueue" "$ROOT/crds/volcano"
    d=$(cd "$ROOT" && gorun mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" 2>>"$logf" |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("Dir",""))')
    [[ -d $d/config/components/crd/bases ]] || { log "crds: no Kueue CRDs (see $logf)"; return 1; }
    cp "$d"/config/components/crd/bases/*.yaml "$ROOT/crds/kueue/"
    mkdir -p "$ROOT/manifests/kueue"   # webhook configurations + the manager's default config
    cp "$d"/config/components/webhook/manifests.yaml "$ROOT/manifests/kueue/webhooks.yaml"
    cp "$d"/config/components/manager/controller_manager_config.yaml "$ROOT/manifests/kueue/"
    # the manager's ClusterRole, then its Role for Secrets in its own namespace
    cat "$d"/config/components/rbac/role.yaml <(echo ---) "$d"/config/components/rbac/manager_secrets_role.yaml \
        > "$ROOT/manifests/kueue/manager-role.yaml"
    d=$(cd "$ROOT" && gorun mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" 2>>"$logf" |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("Dir",""))' || true)
    if [[ -d $d/kustomize/stage ]]; then   # KWOK's stock "fast" stages (kwokctl's defaults)
        mkdir -p "$ROOT/manifests/kwok"
        cp "$d"/kustomize/rbac/role.yaml "$ROOT/manifests/kwok/role.yaml"   # its ClusterRole
        cat "$d"/kustomize/stage/node/fast/node-initialize.yaml \
            <(echo ---) "$d"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
            <(echo ---) "$d"/kustomize/stage/pod/fast/pod-ready.yaml \
            <(echo ---) "$d"/kustomize/stage/pod/fast/pod-complete.yaml \
            <(echo ---) "$d"/kustomize/stage/pod/fast/pod-delete.yaml >"$ROOT/manifests/kwok/stages.yaml"
    fi
    d=$(cd "$ROOT" && gorun mod download -json "volcano.sh/volcano@$VOLCANO_VERSION" 2>>"$logf" |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("Dir",""))' || true)
    if [[ -d $d/config/crd/volcano/bases ]]; then
        # all of them: vc-controller-manager's jobflow controllers wait for their own
        cp "$d"/config/crd/volcano/bases/*.yaml "$d"/config/crd/jobflow/bases/*.yaml "$ROOT/crds/volcano/"
        # the scheduler's and the controllers' ClusterRoles from upstream's installer
        mkdir -p "$ROOT/manifests/volcano"
        awk 'BEGIN { RS = "\n---\n" }
             /(^|\n)kind: ClusterRole\n/ && /\n  name: volcano-(scheduler|controllers)\n/ { printf "---\n%s\n", $0 }' \
            "$d/installer/volcano-development.yaml" >"$ROOT/manifests/volcano/roles.yaml"
        [[ $(grep -c '^kind: ClusterRole$' "$ROOT/manifests/volcano/roles.yaml") == 2 ]] ||
            { log "crds: volcano-scheduler/volcano-controllers ClusterRoles not found in $d/installer"; return 1; }
    else
        log "crds: no Volcano CRDs (module refused? see $logf)"
    fi
    chmod -R u+w "$ROOT/crds" "$ROOT/manifests"
    set_stamp crds "$want"
}

# --- main (one function, so that editing this file while it runs is harmless) ---------
main() {
    declare -A RESULT SECONDS_TAKEN
    rc=0
    for c in $COMPONENTS; do
        t0=$EPOCHREALTIME; st=0
        case $c in
            etcd) build_etcd || st=$? ;;
            kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubelet|kube-proxy) build_k8s_cmd "$c" || st=$? ;;
            kueue) go_install kueue "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" kueue || st=$? ;;
            kwok) go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" kwok || st=$? ;;
            volcano) build_volcano || st=$? ;;
            crds) copy_crds || st=$? ;;
            images) build_images || st=$? ;;
            coredns) build_coredns || st=$? ;;
            *) die "unknown component '$c' (known: $DEFAULT_COMPONENTS)" ;;
        esac
        SECONDS_TAKEN[$c]=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
        case $st in
            0) RESULT[$c]="ok ($(stamp_of "$c"))" ;;
            2) RESULT[$c]="refused by the proxy (see $NOTES)" ;;   # not fatal: nothing to build
            *) RESULT[$c]="FAILED (see $LOGS/$c.log)"; rc=1 ;;
        esac
    done
    for c in $COMPONENTS; do
        size=""
        for f in "$BIN/$c" ; do [[ -f $f ]] && size=" $(du -h "$f" | cut -f1)"; done
        printf 'build-k8s: %-24s %6ss %s%s\n' "$c" "${SECONDS_TAKEN[$c]}" "${RESULT[$c]}" "$size" >&2
    done
    printf 'K8S_BIN=%s\n' "$BIN"
    return $rc
}
main; exit $?

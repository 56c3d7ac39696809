#!/usr/bin/env bash
# Make the Pulumi engine (CLI) available offline, built from the Go module proxy.
#
#   scripts/install-pulumi.sh            # last line of stdout: PULUMI_BIN=<dir>
#   export PATH="$(scripts/install-pulumi.sh | sed -n 's/^PULUMI_BIN=//p'):$PATH"
#
# 1. A `pulumi` on PATH whose version is >= the Python SDK's (requirements.txt,
#    `pulumi==X`) is used as is.
# 2. Otherwise an install under ${RAILYARD_CACHE:-~/.cache/railyard}/pulumi/<ver>/bin
#    that reports such a version is reused (no network needed).
# 3. Otherwise github.com/pulumi/pulumi/pkg/v3/cmd/pulumi is built from the Go
#    module proxy at vX (or, when the proxy does not serve vX, the closest served
#    version >= X; failing that the newest served one below X), through a wrapper
#    go.mod generated in the cache dir that repeats pkg/v3's non-local replaces.
# The Python language host (pulumi-language-python, needed only by `pulumi up` on a
# Pulumi.yaml project, not by Automation API inline programs) is tried too; the
# proxy may refuse it, which is reported but not fatal.  pulumi-resource-pulumi-python
# (dynamic providers) and pulumi-language-python-exec are copied from the sdk/v3
# module zip.  Progress goes to stderr; only the final PULUMI_BIN= line to stdout.
set -euo pipefail

log() { printf 'install-pulumi: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ_VERSION=$(sed -n 's/^pulumi==\([0-9][0-9.]*\).*/\1/p' "$ROOT/requirements.txt" | head -n1)
[[ -n $REQ_VERSION ]] || die "no 'pulumi==X' line in $ROOT/requirements.txt"
CACHE=${RAILYARD_CACHE:-$HOME/.cache/railyard}/pulumi
export PULUMI_SKIP_UPDATE_CHECK=true

PKG_MOD=github.com/pulumi/pulumi/pkg/v3
SDK_MOD=github.com/pulumi/pulumi/sdk/v3
LANG_MOD=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
VERSION_VAR=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version

# version_ge A B: true when A >= B (plain dotted versions, no leading v)
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1) == "$2" ]]; }

# Version reported by a pulumi binary, without the leading v ('' if it fails).
pulumi_version_of() {
    local out
    out=$("$1" version 2>/dev/null | head -n1) || return 0
    out=${out#v}
    [[ $out =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] && printf '%s' "${BASH_REMATCH[0]}"
    return 0
}

# The tiny scripts that live next to the engine, taken from the sdk/v3 module zip.
install_helpers() {  # bin_dir sdk_dir
    local bin=$1 sdk=$2 src dst name
    for name in dist/pulumi-resource-pulumi-python cmd/pulumi-language-python-exec; do
        src=$sdk/python/$name
        dst=$bin/$(basename "$name")
        [[ -f $src ]] || { log "WARNING: $src not in the sdk/v3 module zip"; continue; }
        if ! cmp -s "$src" "$dst" 2>/dev/null; then
            install -m 0755 "$src" "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
            log "installed $dst"
        fi
    done
}

find_go() {
    GO=$(command -v go || true)
    [[ -n $GO ]] || { [[ -x /usr/local/go/bin/go ]] && GO=/usr/local/go/bin/go; }
    [[ -n $GO ]] || die "no go on PATH nor at /usr/local/go/bin/go"
    # Keep GOPROXY/GOPATH/GOCACHE as configured; add -mod=mod to the configured GOFLAGS.
    local flags
    flags=$("$GO" env GOFLAGS)
    [[ " $flags " == *" -mod="* ]] || flags="${flags:+$flags }-mod=mod"
    export GOFLAGS=$flags
}

# sdk/v3 module dir for a version (downloading it if needed), '' on failure.
sdk_dir_for() {
    "$GO" mod download -json "$SDK_MOD@v$1" 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Dir",""))' 2>/dev/null || true
}

# --- 1. a pulumi already on PATH -------------------------------------------------
if PATH_PULUMI=$(command -v pulumi 2>/dev/null); then
    v=$(pulumi_version_of "$PATH_PULUMI")
    if [[ -n $v ]] && version_ge "$v" "$REQ_VERSION"; then
        BIN=$(cd "$(dirname "$(readlink -f "$PATH_PULUMI")")" && pwd)
        log "using pulumi v$v on PATH ($PATH_PULUMI) >= SDK $REQ_VERSION"
        if [[ ! -x $BIN/pulumi-resource-pulumi-python ]] && ! command -v pulumi-resource-pulumi-python >/dev/null; then
            if [[ -w $BIN ]]; then
                find_go
                sdk=$(sdk_dir_for "$REQ_VERSION")
                if [[ -n $sdk ]]; then
                    install_helpers "$BIN" "$sdk"
                else
                    log "WARNING: could not fetch $SDK_MOD@v$REQ_VERSION for pulumi-resource-pulumi-python"
                fi
            else
                log "WARNING: pulumi-resource-pulumi-python missing and $BIN not writable"
            fi
        fi
        echo "PULUMI_BIN=$BIN"
        exit 0
    fi
    log "pulumi on PATH reports '${v:-?}' < $REQ_VERSION (or no version): ignoring it"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9   # one installer at a time per cache (CI and a developer on one machine)

# --- 2. an install already in the cache ------------------------------------------
cached_version() {  # prints the smallest cached version >= REQ with a working binary
    local d v
    for d in $(find "$CACHE" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | sort -V); do
        version_ge "$d" "$REQ_VERSION" || continue
        [[ -x $CACHE/$d/bin/pulumi ]] || continue
        v=$(pulumi_version_of "$CACHE/$d/bin/pulumi")
        [[ $v == "$d" ]] && { printf '%s' "$d"; return 0; }
    done
    return 0
}

CACHED=$(cached_version)
if [[ -n $CACHED ]]; then
    log "cached pulumi v$CACHED in $CACHE/$CACHED/bin reports the right version: skipping the build"
fi

# --- 3. build from the Go module proxy (skipped when cached) ----------------------
if [[ -n $CACHED ]] && ! command -v go >/dev/null && [[ ! -x /usr/local/go/bin/go ]]; then
    log "no go: leaving the cached install as it is"
    echo "PULUMI_BIN=$CACHE/$CACHED/bin"
    exit 0
fi
find_go
log "go: $("$GO" version | cut -d' ' -f3), GOPROXY=$("$GO" env GOPROXY), GOFLAGS=$GOFLAGS"

# download_json MOD@VER -> prints JSON (with .Error on failure); exit status 0 if ok
download_json() {
    local out
    out=$("$GO" mod download -json "$1" 2>/dev/null) || true
    printf '%s' "$out"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1] or "{}"); sys.exit(0 if d.get("Dir") else 1)' "$out"
}
json_get() { python3 -c 'import json,sys; print(json.loads(sys.argv[1] or "{}").get(sys.argv[2]) or "")' "$1" "$2"; }

choose_version() {
    local out err served cand
    if out=$(download_json "$PKG_MOD@v$REQ_VERSION"); then
        CHOSEN=$REQ_VERSION; PKG_JSON=$out; return 0
    fi
    err=$(json_get "$out" Error); err=${err:-"(no answer from go mod download)"}
    log "$PKG_MOD@v$REQ_VERSION is not served: $err"
    served=$("$GO" list -m -versions "$PKG_MOD" 2>&1 | tr ' ' '\n' | sed -n 's/^v\([0-9]*\.[0-9]*\.[0-9]*\)$/\1/p' | sort -uV) \
        || true
    [[ -n $served ]] || die "the proxy lists no versions of $PKG_MOD"
    # closest >= REQ first (ascending), then the ones below (descending)
    for cand in $(awk -v r="$REQ_VERSION" 'BEGIN{split(r,R,".")} {split($0,V,"."); \
            c=(V[1]!=R[1])?V[1]-R[1]:(V[2]!=R[2])?V[2]-R[2]:V[3]-R[3]; if(c>0) print}' <<<"$served" | sort -V) \
            $(awk -v r="$REQ_VERSION" 'BEGIN{split(r,R,".")} {split($0,V,"."); \
            c=(V[1]!=R[1])?V[1]-R[1]:(V[2]!=R[2])?V[2]-R[2]:V[3]-R[3]; if(c<0) print}' <<<"$served" | sort -rV); do
        if out=$(download_json "$PKG_MOD@v$cand"); then
            CHOSEN=$cand; PKG_JSON=$out
            if version_ge "$cand" "$REQ_VERSION"; then
                log "using the closest served version v$cand (>= SDK $REQ_VERSION)"
            else
                log "WARNING: no served version >= $REQ_VERSION; using v$cand, older than the SDK"
            fi
            return 0
        fi
        log "$PKG_MOD@v$cand is listed but not served: $(json_get "$out" Error)"
    done
    die "no version of $PKG_MOD could be downloaded"
}

# Non-local replace directives of a go.mod file, as "old[@v] => new@v" lines for go mod edit.
nonlocal_replaces() {
    "$GO" mod edit -json "$1" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    old, new = r["Old"], r["New"]
    if not new.get("Version"):
        continue  # local directory replace (e.g. ../sdk): the required version stands in
    o = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
    print(o + "=" + new["Path"] + "@" + new["Version"])'
}

# write_wrapper DIR GOMOD_FOR_GO_DIRECTIVE REPLACE_SOURCE_GOMOD... -- MOD@VER...
write_wrapper() {
    local dir=$1 gomod=$2; shift 2
    local -a replace_srcs=() reqs=()
    while [[ $1 != -- ]]; do replace_srcs+=("$1"); shift; done; shift
    reqs=("$@")
    rm -rf "$dir"; mkdir -p "$dir"
    local godir
    godir=$("$GO" mod edit -json "$gomod" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Go") or "")')
    printf 'module railyard.local/pulumi-build\n\ngo %s\n' "${godir:-1.26}" >"$dir/go.mod"
    local r f
    for r in "${reqs[@]}"; do (cd "$dir" && "$GO" mod edit -require="$r"); done
    for f in "${replace_srcs[@]}"; do
        while IFS= read -r r; do
            if [[ -n $r ]]; then (cd "$dir" && "$GO" mod edit -replace="$r"); fi
        done < <(nonlocal_replaces "$f")
    done
}

if [[ -n $CACHED ]]; then
    # Everything needed is in the module cache already: no network use here.
    CHOSEN=$CACHED; PKG_JSON=$(download_json "$PKG_MOD@v$CACHED") || true
else
    choose_version
fi
VER=$CHOSEN
DEST=$CACHE/$VER
BIN=$DEST/bin
mkdir -p "$BIN"
PKG_GOMOD=$(json_get "$PKG_JSON" GoMod)
SDK_DIR=$(sdk_dir_for "$VER")
LDFLAGS="-X $VERSION_VAR=v$VER"

if [[ $(pulumi_version_of "$BIN/pulumi") != "$VER" ]]; then
    [[ -n $PKG_GOMOD && -n $SDK_DIR ]] || die "could not download $PKG_MOD and $SDK_MOD at v$VER"
    write_wrapper "$DEST/src-pulumi" "$PKG_GOMOD" "$PKG_GOMOD" -- "$PKG_MOD@v$VER" "$SDK_MOD@v$VER"
    log "building $PKG_MOD/cmd/pulumi v$VER in $DEST/src-pulumi (first build takes minutes) ..."
    t0=$SECONDS
    (cd "$DEST/src-pulumi" && "$GO" build -ldflags "$LDFLAGS" -o "$BIN/pulumi.tmp.$$" "$PKG_MOD/cmd/pulumi") \
        >"$DEST/build.log" 2>&1 \
        || { rm -f "$BIN/pulumi.tmp.$$"; tail -n 40 "$DEST/build.log" >&2; die "go build of pulumi v$VER failed (log: $DEST/build.log)"; }
    mv -f "$BIN/pulumi.tmp.$$" "$BIN/pulumi"
    log "built pulumi v$VER in $((SECONDS - t0))s"
    got=$(pulumi_version_of "$BIN/pulumi")
    [[ $got == "$VER" ]] || die "$BIN/pulumi reports '$got', expected $VER"
fi
if [[ -n $SDK_DIR ]]; then
    install_helpers "$BIN" "$SDK_DIR"
elif [[ ! -x $BIN/pulumi-resource-pulumi-python ]]; then
    log "WARNING: $SDK_MOD@v$VER unavailable: no pulumi-resource-pulumi-python (dynamic providers will fail)"
fi

# --- the Python language host (optional) ---------------------------------------------
# The module has no version tags: try the release tag name, then the release commit
# (Origin.Hash of the sdk/pkg download info, when the proxy gives it).
build_langhost() {
    local logf=$DEST/langhost.log q out lang_json="" hash info
    : >"$logf"
    local -a queries=("v$VER")
    [[ $REQ_VERSION == "$VER" ]] || queries+=("v$REQ_VERSION")
    local modcache
    modcache=$("$GO" env GOMODCACHE)
    for info in "$modcache/cache/download/$SDK_MOD/@v/v$VER.info" "$modcache/cache/download/$PKG_MOD/@v/v$VER.info"; do
        [[ -f $info ]] || continue
        hash=$(python3 -c 'import json,sys; print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash",""))' "$info" 2>/dev/null || true)
        [[ -n $hash ]] && queries+=("$hash")
    done
    for q in "${queries[@]}"; do
        out=$("$GO" list -m -json "$LANG_MOD@$q" 2>&1) && { lang_json=$out; break; }
        printf 'go list -m -json %s@%s:\n%s\n' "$LANG_MOD" "$q" "$out" >>"$logf"
    done
    if [[ -z $lang_json ]]; then
        log "pulumi-language-python: could not fetch $LANG_MOD (the proxy has no version tags for it):"
        sed 's/^/    /' "$logf" >&2
        return 1
    fi
    local lver
    lver=$(json_get "$lang_json" Version)
    out=$(download_json "$LANG_MOD@$lver") || { printf '%s\n' "$out" >>"$logf"; log "download of $LANG_MOD@$lver failed: $(json_get "$out" Error)"; return 1; }
    write_wrapper "$DEST/src-langhost" "$PKG_GOMOD" "$PKG_GOMOD" "$(json_get "$out" GoMod)" -- \
        "$LANG_MOD@$lver" "$PKG_MOD@v$VER" "$SDK_MOD@v$VER"
    log "building pulumi-language-python ($LANG_MOD@$lver) ..."
    local t0=$SECONDS
    (cd "$DEST/src-langhost" && "$GO" build -ldflags "$LDFLAGS" -o "$BIN/pulumi-language-python.tmp.$$" "$LANG_MOD") >>"$logf" 2>&1 \
        || { rm -f "$BIN/pulumi-language-python.tmp.$$"; log "go build of the language host failed, see $logf"; return 1; }
    mv -f "$BIN/pulumi-language-python.tmp.$$" "$BIN/pulumi-language-python"
    log "built pulumi-language-python in $((SECONDS - t0))s"
}
if [[ ! -x $BIN/pulumi-language-python && -n $PKG_GOMOD ]]; then
    build_langhost || log "WARNING: no pulumi-language-python: \`pulumi up\` on a Pulumi.yaml project will not work; Automation API inline programs (program=...) do"
fi

echo "PULUMI_BIN=$BIN"

#!/usr/bin/env bash
# Install and configure podman for the railyard lab (Debian 12, run as root).
#
# Idempotent: safe to run again; it installs only missing packages, runs
# `apt-get update` only when a package cannot be found, and edits only the
# three settings it owns in /etc/containers/containers.conf.
#
# What this machine needs (see shared DESIGN.md, "The lab: the embedded default"):
#   * runc, not crun: crun fails on cgroup v1 hybrid ("cgroups in hybrid mode
#     not supported").
#   * default_ulimits nofile=1024:1024, nproc=4096:4096: the VM refuses to raise
#     rlimits; without them every `podman run` fails with "error setting rlimits
#     for ready process: error setting rlimit type 7: operation not permitted".
#   * netavark + aardvark-dns (pinned as network_backend): containers on one
#     podman network resolve each other by name. Debian's podman also ships a
#     CNI bridge config whose plugins are not installed; with netavark it is
#     unused.
#   * fs.inotify.max_user_instances >= 1024 and max_user_watches >= 524288: every
#     process in every node container (systemd, kubelet, apiserver, Kueue...) draws
#     on root's one per-host limit; at Debian's 128 instances daemons fail with
#     "too many open files" once the lab and a molecule scenario run side by side.
#     Only raised, never lowered; kept in /etc/sysctl.d/60-railyard-lab.conf.
#     `railyard up` and molecule's prepare refuse a host below these
#     (railyard/drivers/podman.py INOTIFY_MINIMUM).
#
# Usage: scripts/setup-podman.sh [--build-image]
#   --build-image   also build (or reuse the cached) lab node image via
#                   `python -m railyard.lab.image` and run a container from it.
set -euo pipefail

IMAGE="${RAILYARD_LAB_IMAGE:-localhost/railyard-node:13}"
CONF="${CONTAINERS_CONF_PATH:-/etc/containers/containers.conf}"
BUILD_IMAGE=0
for arg in "$@"; do
  case "$arg" in
    --build-image) BUILD_IMAGE=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "setup-podman: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf 'setup-podman: %s\n' "$*"; }
die() { printf 'setup-podman: ERROR: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (the lab runs rootful podman)"

export DEBIAN_FRONTEND=noninteractive

# Rootful podman on Debian 12 (podman 4.3). No recommends: buildah, fuse-overlayfs,
# slirp4netns, uidmap and dbus-user-session are for rootless use, which the lab
# does not do. python3 is needed below to merge containers.conf.
PACKAGES=(
  podman runc conmon golang-github-containers-common
  netavark aardvark-dns iptables catatonit
  debootstrap tar python3 ca-certificates
)

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != "installed" ]]; then
      printf '%s\n' "$p"
    fi
  done
}

mapfile -t MISSING < <(missing_packages)
if ((${#MISSING[@]})); then
  log "installing: ${MISSING[*]}"
  # Update the package lists only when they are absent or lack a candidate.
  need_update=0
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    need_update=1
  else
    for p in "${MISSING[@]}"; do
      cand="$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')"
      if [[ -z "$cand" || "$cand" == "(none)" ]]; then need_update=1; break; fi
    done
  fi
  if ((need_update)); then
    log "apt-get update"
    apt-get update -q
  fi
  if ! apt-get install -y -q --no-install-recommends "${MISSING[@]}"; then
    # Stale lists can name package versions the mirror no longer has.
    log "install failed; retrying after apt-get update"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${MISSING[@]}"
  fi
else
  log "packages already installed"
fi

# --- the host's inotify limits (see the header) ---
SYSCTL_CONF=/etc/sysctl.d/60-railyard-lab.conf
conf_lines=()
for kv in fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288; do
  key=${kv%%=*} want=${kv#*=}
  have=$(sysctl -n "$key")
  if ((have < want)); then
    sysctl -q -w "$key=$want" || die "cannot raise $key from $have to $want (sysctl -w failed)"
    log "$key: $have -> $want"
    have=$want
  fi
  conf_lines+=("$key = $have")
done
if [[ ! -f $SYSCTL_CONF ]] || [[ "$(cat "$SYSCTL_CONF")" != "$(printf '%s\n' "# railyard lab (scripts/setup-podman.sh)" "${conf_lines[@]}")" ]]; then
  printf '%s\n' "# railyard lab (scripts/setup-podman.sh)" "${conf_lines[@]}" > "$SYSCTL_CONF"
fi

# --- /etc/containers/containers.conf: set our three keys, keep everything else ---
mkdir -p "$(dirname "$CONF")"
python3 - "$CONF" <<'PY'
"""Set [engine] runtime, [containers] default_ulimits, [network] network_backend.

Edits the file line by line so comments and unrelated settings survive;
a key that already exists (also as a multi-line array) is replaced in place,
a missing key is appended to its table, a missing table is appended.
"""
import json
import os
import re
import sys
import tomllib

path = sys.argv[1]
OUR_ULIMITS = ["nofile=1024:1024", "nproc=4096:4096"]

try:
    with open(path, encoding="utf-8") as f:
        text = f.read()
except FileNotFoundError:
    text = ""
try:
    current = tomllib.loads(text)
except tomllib.TOMLDecodeError as exc:
    sys.exit(f"setup-podman: ERROR: {path} is not valid TOML ({exc}); fix it by hand")

# Keep ulimits for other resources (core=..., memlock=...); ours win for nofile/nproc.
old_ulimits = current.get("containers", {}).get("default_ulimits", [])
if not isinstance(old_ulimits, list):
    old_ulimits = []
ulimits = [u for u in old_ulimits if str(u).split("=", 1)[0] not in ("nofile", "nproc")]
ulimits += OUR_ULIMITS
WANT_VALUES = {
    "containers": {"default_ulimits": ulimits},
    "engine": {"runtime": "runc"},
    "network": {"network_backend": "netavark"},
}
WANT = {
    table: {key: json.dumps(val) for key, val in kv.items()}  # JSON strings/arrays are TOML
    for table, kv in WANT_VALUES.items()
}
if all(
    current.get(table, {}).get(key) == val
    for table, kv in WANT_VALUES.items()
    for key, val in kv.items()
):
    print(f"setup-podman: {path} already configured")
    sys.exit(0)

lines = text.splitlines()
header = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]\s*(#.*)?$")
out: list[str] = []
table = None
done: set[tuple[str, str]] = set()
skip_array = False


def flush_missing(tbl):
    """Append keys of tbl that were not seen before leaving the table."""
    for key, val in WANT.get(tbl, {}).items():
        if (tbl, key) not in done:
            # Insert before trailing blank lines of the table.
            pos = len(out)
            while pos > 0 and not out[pos - 1].strip():
                pos -= 1
            out.insert(pos, f"{key} = {val}")
            done.add((tbl, key))


for line in lines:
    if skip_array:
        if "]" in line.split("#", 1)[0]:
            skip_array = False
        continue
    m = header.match(line)
    if m and not line.lstrip().startswith("[["):
        if table is not None:
            flush_missing(table)
        table = m.group(1)
        out.append(line)
        continue
    if table in WANT:
        km = re.match(r"^\s*([A-Za-z0-9_\-]+)\s*=(.*)$", line)
        if km and km.group(1) in WANT[table]:
            key = km.group(1)
            out.append(f"{key} = {WANT[table][key]}")
            done.add((table, key))
            rest = km.group(2).split("#", 1)[0]
            if rest.count("[") > rest.count("]"):
                skip_array = True  # drop the old multi-line array body
            continue
    out.append(line)
if table is not None:
    flush_missing(table)
for tbl, kv in WANT.items():
    if any((tbl, k) not in done for k in kv):
        if out and out[-1].strip():
            out.append("")
        out.append(f"[{tbl}]")
        for key, val in kv.items():
            out.append(f"{key} = {val}")
            done.add((tbl, key))

new = "\n".join(out) + "\n"
parsed = tomllib.loads(new)  # never write a file podman cannot read
for table, kv in WANT_VALUES.items():
    for key, val in kv.items():
        assert parsed[table][key] == val, (table, key, parsed.get(table))
if text:
    with open(path + ".railyard-bak", "w", encoding="utf-8") as f:
        f.write(text)
tmp = path + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.write(new)
os.replace(tmp, path)
print(f"setup-podman: wrote {path}" + (f" (previous in {path}.railyard-bak)" if text else ""))
PY

# --- verify ---
command -v podman >/dev/null || die "podman not on PATH after install"
info_err="$(mktemp)"
trap 'rm -f "$info_err"' EXIT
if ! info="$(podman info --format '{{.Version.Version}} {{.Host.OCIRuntime.Name}} {{.Host.CgroupsVersion}} {{.Store.GraphDriverName}} {{.Host.NetworkBackend}}' 2>"$info_err")"; then
  die "podman info failed: $(cat "$info_err")"
fi
read -r version runtime cgroups driver netbackend <<<"$info"
log "podman $version: runtime=$runtime cgroups=$cgroups storage=$driver network=$netbackend"
[[ "$runtime" == "runc" ]] || die "podman uses runtime '$runtime', expected runc (check $CONF and CONTAINERS_CONF)"
[[ "$driver" == "overlay" ]] || log "warning: storage driver is '$driver', not overlay: images and containers will be slow and large"
[[ "$netbackend" == "netavark" ]] || log "warning: network backend is '$netbackend', not netavark: name resolution between containers may not work"

if ((BUILD_IMAGE)); then
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  py="python3"
  [[ -x "$repo/.venv/bin/python" ]] && py="$repo/.venv/bin/python"
  log "building/reusing lab image with $py -m railyard.lab.image"
  (cd "$repo" && "$py" -m railyard.lab.image)
fi

if podman image exists "$IMAGE"; then
  if out="$(podman run --rm --network none "$IMAGE" /bin/sh -c 'echo ok; ulimit -n' 2>&1)"; then
    log "podman run $IMAGE: $(echo "$out" | tr '\n' ' ')"
  else
    die "podman run $IMAGE failed: $out"
  fi
else
  log "image $IMAGE not built yet (python -m railyard.lab.image, or rerun with --build-image); skipped the run check"
fi
log "done"

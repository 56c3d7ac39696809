#!/usr/bin/env bash
# Install Debian 12's real Slurm daemons (22.05) and munge so that
# tests/support/slurmhost.py can start private slurmctld/munged instances.
#
# - idempotent, runs as root with no stdin (CI)
# - installs slurmctld, slurmd, slurm-client, munge -- never the slurm-wlm
#   meta package and never slurm-wlm-emulator (its alternatives win on
#   priority and slurmctld then dies with "No front end nodes defined")
# - points the slurmctld/slurmd/slurmstepd alternatives at the real *-wlm
#   builds if something else selected the emulator
# - leaves the Debian-packaged services stopped and disabled: the harness
#   runs its own munged and slurmctld with private sockets, state and logs
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [[ ${EUID} -ne 0 ]]; then
    echo "setup-slurm-host: must run as root" >&2
    exit 1
fi

PACKAGES=(slurmctld slurmd slurm-client munge)
SERVICES=(slurmctld slurmd munge)

log() { echo "setup-slurm-host: $*"; }

# Keep package postinst scripts from starting daemons during install.
# An existing policy-rc.d (e.g. Docker's "exit 101") is left alone.
POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=0
if [[ ! -e ${POLICY} ]]; then
    printf '#!/bin/sh\n# temporary, written by railyard setup-slurm-host.sh\nexit 101\n' >"${POLICY}"
    chmod 755 "${POLICY}"
    OWN_POLICY=1
fi
cleanup() {
    if [[ ${OWN_POLICY} -eq 1 ]]; then rm -f "${POLICY}"; fi
}
trap cleanup EXIT

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("${p}")
    fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]}"
    if ! apt-get install -y --no-install-recommends "${missing[@]}" </dev/null; then
        log "apt-get install failed; refreshing package lists and retrying"
        apt-get update </dev/null
        apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
    fi
else
    log "packages already installed: ${PACKAGES[*]}"
fi

# The emulator must never be present: remove it if something pulled it in.
if dpkg-query -W -f='${Status}' slurm-wlm-emulator 2>/dev/null | grep -q 'install ok installed'; then
    log "removing slurm-wlm-emulator"
    apt-get remove -y slurm-wlm-emulator </dev/null
fi

# Alternatives must resolve to the real builds (the emulator ones win on priority).
for name in slurmctld slurmd slurmstepd; do
    real=/usr/sbin/${name}-wlm
    if [[ ! -x ${real} ]]; then
        log "error: ${real} missing" >&2
        exit 1
    fi
    if update-alternatives --query "${name}" >/dev/null 2>&1; then
        current=$(readlink -f "/usr/sbin/${name}" || true)
        if [[ ${current} != "${real}" ]]; then
            log "alternative ${name} -> ${current:-none}; setting ${real}"
            update-alternatives --set "${name}" "${real}"
        fi
    fi
    resolved=$(readlink -f "/usr/sbin/${name}" || true)
    if [[ ${resolved} != "${real}" ]]; then
        log "error: /usr/sbin/${name} resolves to '${resolved}', expected ${real}" >&2
        exit 1
    fi
done

# Do not leave the packaged services enabled or running; the harness starts
# private instances. Only act where systemd is actually PID 1.
if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
    for s in "${SERVICES[@]}"; do
        if systemctl list-unit-files "${s}.service" >/dev/null 2>&1; then
            systemctl disable --now "${s}.service" >/dev/null 2>&1 || true
        fi
    done
else
    # sysvinit / containers: stop anything the postinst may have started.
    for s in "${SERVICES[@]}"; do
        if [[ -x /etc/init.d/${s} ]]; then
            /etc/init.d/"${s}" stop >/dev/null 2>&1 || true
        fi
        if command -v update-rc.d >/dev/null 2>&1; then
            update-rc.d "${s}" disable >/dev/null 2>&1 || true
        fi
    done
fi

for bin in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/scontrol; do
    [[ -x ${bin} ]] || { log "error: ${bin} not installed" >&2; exit 1; }
done
log "ready: $(/usr/sbin/slurmctld -V), $(/usr/sbin/munged --version 2>&1 | head -n1)"

#!/usr/bin/env bash
# Build a small Enroot container image (a squashfs file) offline, from Debian packages: no
# registry serves container images here, so `srun --container-image=docker://...` cannot
# work, but Pyxis takes a squashfs path (one that starts with / or ./) and hands it to
# `enroot create`.
#
#   scripts/build-container-image.sh         # -> /var/cache/railyard/images/busybox.sqsh
#
# Output: ${RAILYARD_IMAGES_DIR:-/var/cache/railyard/images}/${RAILYARD_IMAGE_NAME:-busybox}.sqsh
#         (copy it to the cluster's shared filesystem, e.g. /shared/images/, for srun).
# Work:   ${RAILYARD_IMAGE_CACHE:-~/.cache/railyard/images}: the downloaded .deb and the
#         unpacked root filesystem, never the repository.
# Cached: the image is not touched when its stamp (.stamp-<name> next to it: sha256 of this
#         script, the busybox-static version apt offers and squashfs-tools' version) matches;
#         a second run returns at once without the network.
#
# What is in it: Debian's busybox-static (`apt-get download` from the Debian mirror the host's
# apt uses; one static binary, so no libc or NSS), one symlink per applet from
# `busybox --list-full` in a merged-/usr layout (/bin -> usr/bin), and what Enroot reads
# from an image: /etc/passwd, group, shadow and gshadow with root and nobody (Enroot's
# 10-shadow hook adds the job's user at every start; without shadow files `pwck -R` gives up
# and passwd grows by three lines a start), empty /etc/fstab and /etc/environment, /etc/rc (Enroot runs
# it as `sh /etc/rc CMD...`; `enroot import` writes the same kind of script from a Docker
# image's config: cd to the working directory, source /etc/rc.local, exec the command or a
# shell; Pyxis puts `exec "$@"` into rc.local unless the entrypoint is wanted),
# the empty files Enroot bind-mounts over (/etc/hosts, hostname, resolv.conf, machine-id),
# and the directories /proc /sys /dev /tmp /run /home /shared /root.
#
# mksquashfs runs as `enroot import`/`enroot export` run it (enroot 4.1.2 src/docker.sh,
# src/runtime.sh): `mksquashfs ROOTFS FILE -all-root -no-progress -processors N
# ${ENROOT_SQUASH_OPTIONS}`, whose default (conf/enroot.conf.in, and the spec's
# partitions.slurm.enroot.squash_options) is `-comp lzo -noD -exit-on-error`; set
# RAILYARD_SQUASH_OPTIONS to match a spec that differs. SOURCE_DATE_EPOCH is the busybox
# binary's time, so the same inputs give the same bytes.
# Needs root only to apt-get install squashfs-tools when it is missing, and to write
# /var/cache/railyard. Runs mksquashfs under `nice -n 19`.
set -euo pipefail
export LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive

NAME=${RAILYARD_IMAGE_NAME:-busybox}
OUT=${RAILYARD_IMAGES_DIR:-/var/cache/railyard/images}
CACHE=${RAILYARD_IMAGE_CACHE:-$HOME/.cache/railyard/images}
SQUASH_OPTIONS=${RAILYARD_SQUASH_OPTIONS:--comp lzo -noD -exit-on-error}
PKG=busybox-static

log() { printf 'build-container-image: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,35p' "$0"; exit 0; fi
(($# == 0)) || die "no arguments expected (see --help); set RAILYARD_IMAGE_NAME or RAILYARD_IMAGES_DIR"
[[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "RAILYARD_IMAGE_NAME '$NAME' is not a plain file name"

mkdir -p "$CACHE" "$OUT"
exec 9>"$CACHE/.lock"
flock 9

apt_install() {
    local missing=() pkg
    for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg"); done
    ((${#missing[@]})) || return 0
    [[ ${EUID} -eq 0 ]] || die "${missing[*]} missing: run as root (apt-get install) or install it first"
    log "apt: installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=900 "${missing[@]}" >/dev/null ||
        { apt-get update -qq -o DPkg::Lock::Timeout=900 &&
          apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=900 "${missing[@]}" >/dev/null; }
}

candidate() { apt-cache policy "$PKG" 2>/dev/null | sed -n 's/^ *Candidate: //p'; }

apt_install squashfs-tools
version=$(candidate)
if [[ -z $version || $version == "(none)" ]]; then
    [[ ${EUID} -eq 0 ]] || die "apt offers no $PKG: run apt-get update (as root)"
    apt-get update -qq -o DPkg::Lock::Timeout=900
    version=$(candidate)
    [[ -n $version && $version != "(none)" ]] || die "no apt source of this host offers $PKG"
fi

image=$OUT/$NAME.sqsh stampf=$OUT/.stamp-$NAME
stamp=$({
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    printf '%s=%s\n' "$PKG" "$version"
    dpkg-query -W -f='${Package}=${Version}\n' squashfs-tools
    printf '%s\n' "$SQUASH_OPTIONS"
} | sha256sum | cut -d' ' -f1)
if [[ -s $image && $(cat "$stampf" 2>/dev/null) == "$stamp" ]]; then
    log "$image: cached ($PKG $version)"
    exit 0
fi

t0=$SECONDS
arch=$(dpkg --print-architecture)
deb=$CACHE/${PKG}_${version//:/%3a}_$arch.deb
if [[ ! -s $deb ]]; then
    log "apt-get download $PKG=$version"
    # As root, apt downloads as _apt, which cannot write to $CACHE under root's home.
    sandbox=(); [[ ${EUID} -ne 0 ]] || sandbox=(-o APT::Sandbox::User=root)
    (cd "$CACHE" && apt-get download -q "${sandbox[@]}" "$PKG=$version" >/dev/null) ||
        die "apt-get download $PKG=$version failed (is the Debian mirror reachable?)"
    [[ -s $deb ]] || die "apt-get download did not write $deb"
fi

work=$CACHE/build-$NAME rootfs=$CACHE/build-$NAME/rootfs
rm -rf "$work"
mkdir -p "$work/deb" "$rootfs"
dpkg-deb -x "$deb" "$work/deb"
busybox=$(find "$work/deb" -type f -name busybox -perm -u+x | head -n1)
[[ -n $busybox ]] || die "$deb has no busybox binary"
"$busybox" true 2>/dev/null || die "$busybox does not run here (architecture $arch?)"

# Merged /usr: every applet path from --list-full ends up under usr/.
mkdir -p "$rootfs"/usr/{bin,sbin,lib} "$rootfs"/{etc,proc,sys,dev,tmp,run,home,shared,root,var/tmp}
ln -s usr/bin "$rootfs/bin"
ln -s usr/sbin "$rootfs/sbin"
ln -s usr/lib "$rootfs/lib"
ln -s ../run "$rootfs/var/run"
install -m 0755 "$busybox" "$rootfs/usr/bin/busybox"
"$busybox" --list-full | while read -r applet; do
    applet=/usr/${applet#usr/}
    [[ $applet == /usr/bin/busybox || -e $rootfs$applet ]] && continue
    mkdir -p "$(dirname "$rootfs$applet")"
    ln -s /usr/bin/busybox "$rootfs$applet"
done
[[ -L $rootfs/usr/bin/sh ]] || ln -s busybox "$rootfs/usr/bin/sh"
chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
chmod 0700 "$rootfs/root"

printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' >"$rootfs/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$rootfs/etc/group"
# Enroot's 10-shadow hook rewrites passwd and group at every start and leaves it to
# `pwck -R`/`grpck -R` to drop the entries it repeats; they give up without shadow files.
printf '%s\n' 'root:*:1::::::' 'nobody:*:1::::::' >"$rootfs/etc/shadow"
printf '%s\n' 'root:*::' 'nogroup:*::' >"$rootfs/etc/gshadow"
chmod 0640 "$rootfs/etc/shadow" "$rootfs/etc/gshadow"
: >"$rootfs/etc/fstab"
printf '%s\n' 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' >"$rootfs/etc/environment"
for f in hosts hostname resolv.conf machine-id; do : >"$rootfs/etc/$f"; done
cat >"$rootfs/etc/rc" <<'EOF'
# Run by Enroot as `sh /etc/rc [COMMAND [ARG...]]` (enroot-switchroot).
cd / && unset OLDPWD || exit 1
if [ -s /etc/rc.local ]; then
    . /etc/rc.local
fi
if [ $# -gt 0 ]; then
    exec "$@"
else
    exec /bin/sh
fi
EOF
printf '%s\n' '# Sourced by /etc/rc before it runs the command.' >"$rootfs/etc/rc.local"
cat >"$rootfs/etc/os-release" <<EOF
NAME="railyard busybox"
ID=railyard-busybox
VERSION_ID="$version"
PRETTY_NAME="railyard busybox ($PKG $version from Debian, built by scripts/build-container-image.sh)"
EOF

epoch=$(stat -c %Y "$busybox")
tmp=$OUT/.$NAME.sqsh.tmp
rm -f "$tmp"
log "mksquashfs $rootfs -> $image ($SQUASH_OPTIONS)"
SOURCE_DATE_EPOCH=$epoch nice -n 19 mksquashfs "$rootfs" "$tmp" -all-root -no-progress -processors "$(nproc)" \
    $SQUASH_OPTIONS >"$work/mksquashfs.log" 2>&1 || { cat "$work/mksquashfs.log" >&2; die "mksquashfs failed"; }
unsquashfs -s "$tmp" >/dev/null || die "unsquashfs cannot read $tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$image"
printf '%s\n' "$stamp" >"$stampf"
rm -rf "$work"
log "$image: $(du -k "$image" | cut -f1) KiB, $PKG $version, built in $((SECONDS - t0)) s"

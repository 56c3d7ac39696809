#!/usr/bin/env bash
# Build the lab's Enroot and Pyxis .debs from the unmodified release archives in
# ../shared/vendor/ (no Debian release ships them and no registry here serves them).
#
#   scripts/build-vendor.sh              # enroot and pyxis
#   scripts/build-vendor.sh pyxis        # one of them
#
# Output: ${RAILYARD_PACKAGES_DIR:-/var/cache/railyard/packages}/
#           enroot_4.1.2-1_amd64.deb, enroot+caps_4.1.2-1_amd64.deb,
#           nvslurm-plugin-pyxis_0.24.0-1_amd64.deb
#         where inventories/lab/cluster.yaml's partitions.slurm.{enroot,pyxis}.package
#         point, so the roles install them through their ordinary `path:` source.
# Work:   ${RAILYARD_VENDOR_CACHE:-~/.cache/railyard/vendor}/{build,logs}: the archives are
#         unpacked there, never into the repository.
# Cached: a package whose .deb is present and whose stamp (.stamp-<name>: sha256 of the
#         archive, of this script and the versions of its build dependencies) matches is
#         not touched; a second run returns at once.
#
# Where: inside the lab's node image (localhost/railyard-node:<tag>, `railyard lab image`),
#         so the .debs are built against the Debian and the Slurm the nodes run (Debian 13:
#         libslurm-dev 24.11.5, glibc 2.41), whatever the build machine runs. The first run
#         commits a builder image (the node image plus the build dependencies from Debian,
#         localhost/railyard-vendor-build:<tag>, labelled with what it was made from); later
#         runs reuse it. RAILYARD_VENDOR_ON_HOST=1 builds on this machine instead (then it
#         must be the nodes' Debian release).
#
# How (the projects' own packaging, with debuild's lint step left out):
#   pyxis   `make deb` is `debuild -us -uc -G -i -tc` on its debian/ dir; this runs
#           `dpkg-buildpackage -us -uc -b` on it, against the node image's libslurm-dev
#           (Pyxis must be built against the exact spank.h of the Slurm that loads it). The
#           version is checked against the lab spec's cluster.versions.slurm.
#   enroot  `make deb` with FORCE_GLIBC=1 (upstream's glibc build: no musl): dh_make
#           with the pkg/deb templates, then dpkg-buildpackage. Its git submodules are
#           not in the archive; Debian packages stand in for two of them, as
#           ../shared/vendor/README.md says: deps/makeself/makeself.sh is Debian's
#           makeself (/usr/bin/makeself), and deps/linux-headers gets a two-line Makefile
#           that installs linux-libc-dev's /usr/include/{linux,asm-generic,<multiarch>/asm}.
#           deps/musl is not needed with FORCE_GLIBC. enroot-mount and enroot-switchroot
#           call strlcpy/strlcat, which glibc has from 2.38 (Debian 13). On an older glibc
#           (Debian 12's 2.36) Debian's libbsd supplies them (DEB_CPPFLAGS_APPEND="-D_GNU_SOURCE=
#           -include bsd/string.h": the sources define _GNU_SOURCE first thing, the forced
#           include must see it too; LOADLIBES=-l:libbsd.so after the objects, by file name
#           because -lbsd would find deps/dist/libbsd/libbsd.a first; the package then
#           depends on libbsd0).
# Build dependencies come from Debian via apt. Builds run under `nice -n 19`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENDOR=${RAILYARD_VENDOR_DIR:-$ROOT/../shared/vendor}
OUT=${RAILYARD_PACKAGES_DIR:-/var/cache/railyard/packages}
CACHE=${RAILYARD_VENDOR_CACHE:-$HOME/.cache/railyard/vendor}
SPEC=${RAILYARD_SPEC:-$ROOT/inventories/lab/cluster.yaml}
PYXIS_VERSION=0.24.0
ENROOT_VERSION=4.1.2
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

PYXIS_BUILD_DEPS=(build-essential debhelper libslurm-dev)
ENROOT_BUILD_DEPS=(build-essential debhelper dh-make dh-apparmor autotools-dev makeself linux-libc-dev util-linux)
# glibc before 2.38 has no strlcpy/strlcat: libbsd supplies them (see the header).
GLIBC=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
if dpkg --compare-versions "$GLIBC" lt 2.38; then ENROOT_BUILD_DEPS+=(libbsd-dev); fi
IMAGE=${RAILYARD_NODE_IMAGE:-localhost/railyard-node:13}
BUILDER=localhost/railyard-vendor-build:${IMAGE##*:}

log() { printf 'build-vendor: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,41p' "$0"; exit 0; fi
PACKAGES=${*:-enroot pyxis}
[[ ${EUID} -eq 0 ]] || die "must run as root (apt-get install of the build dependencies, $OUT)"

mkdir -p "$CACHE/build" "$CACHE/logs" "$OUT"

# The builder: the node image plus every build dependency, committed once. Its label says
# which node image and which dependency list it was made from; a change of either makes a
# new one.
builder_image() {
    local want have ctr=railyard-vendor-build-$$
    want=$(printf '%s\n' "$(podman image inspect --format '{{.Id}}' "$IMAGE")" "${PYXIS_BUILD_DEPS[*]}" "${ENROOT_BUILD_DEPS[*]}" libbsd-dev |
        sha256sum | cut -d' ' -f1)
    have=$(podman image inspect --format '{{index .Labels "railyard.builder"}}' "$BUILDER" 2>/dev/null || true)
    if [[ $have == "$want" ]]; then printf '%s\n' "$BUILDER"; return 0; fi
    log "builder: $IMAGE plus the build dependencies from Debian -> $BUILDER"
    podman rm -f "$ctr" >/dev/null 2>&1 || true
    # libbsd-dev only where glibc lacks strlcpy; the image decides, not this machine.
    podman run --name "$ctr" -e DEBIAN_FRONTEND=noninteractive "$IMAGE" bash -ec "
        apt-get update -qq
        deps='${PYXIS_BUILD_DEPS[*]} ${ENROOT_BUILD_DEPS[*]/libbsd-dev/}'
        dpkg --compare-versions \$(getconf GNU_LIBC_VERSION | cut -d' ' -f2) lt 2.38 && deps=\"\$deps libbsd-dev\"
        apt-get install -y -qq --no-install-recommends \$deps >/dev/null
        apt-get clean" >&2 || { podman rm -f "$ctr" >/dev/null; die "builder: apt-get in $IMAGE failed"; }
    podman commit -q --change "LABEL railyard.builder=$want" "$ctr" "$BUILDER" >/dev/null
    podman rm -f "$ctr" >/dev/null
    printf '%s\n' "$BUILDER"
}

if [[ ${RAILYARD_VENDOR_ON_HOST:-0} != 1 ]]; then
    command -v podman >/dev/null || die "podman is not installed (scripts/setup-podman.sh): the build runs in the node image"
    podman image exists "$IMAGE" || die "$IMAGE is missing: build it first (railyard lab image)"
    exec 9>"$CACHE/.lock"
    flock 9
    builder=$(builder_image)
    log "building $PACKAGES in $builder ($(podman run --rm "$builder" dpkg-query -W -f='libslurm-dev ${Version}' libslurm-dev))"
    exec 9>&-
    exec podman run --rm --name "railyard-vendor-build-$$" --network none \
        -e RAILYARD_VENDOR_ON_HOST=1 -e RAILYARD_VENDOR_DIR=/vendor -e RAILYARD_PACKAGES_DIR=/out \
        -e RAILYARD_VENDOR_CACHE=/cache -e RAILYARD_SPEC=/railyard/inventories/lab/cluster.yaml \
        -v "$ROOT:/railyard:ro" -v "$(cd "$VENDOR" && pwd):/vendor:ro" -v "$OUT:/out" -v "$CACHE:/cache" \
        "$builder" /railyard/scripts/build-vendor.sh $PACKAGES
fi

exec 9>"$CACHE/.lock"
flock 9

apt_install() {
    local missing=() pkg
    for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg"); done
    ((${#missing[@]})) || return 0
    log "apt: installing build dependencies ${missing[*]}"
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=900 "${missing[@]}" >/dev/null ||
        { apt-get update -qq -o DPkg::Lock::Timeout=900 &&
          apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=900 "${missing[@]}" >/dev/null; }
}

# What a build depends on: the archive, this script, the build dependencies' versions.
inputs_of() {  # archive dep...
    local archive=$1; shift
    {
        sha256sum "$archive" | cut -d' ' -f1
        sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
        dpkg-query -W -f='${Package}=${Version}\n' "$@"
    } | sha256sum | cut -d' ' -f1
}
is_cached() {  # name stamp deb...
    local name=$1 want=$2 f; shift 2
    [[ $(cat "$CACHE/.stamp-$name" 2>/dev/null) == "$want" ]] || return 1
    for f in "$@"; do [[ -s $OUT/$f ]] || return 1; done
}

unpack() {  # archive name -> prints the unpacked source dir
    local archive=$1 name=$2 work=$CACHE/build/$2
    rm -rf "$work" && mkdir -p "$work"
    tar -xzf "$archive" -C "$work"
    local src
    src=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
    [[ -n $src && $(wc -l <<<"$src") -eq 1 ]] || die "$archive: expected one top directory"
    printf '%s\n' "$src"
}

publish() {  # built-deb -> $OUT, atomically
    local deb=$1
    [[ -s $deb ]] || die "the build did not produce $(basename "$deb")"
    install -m 0644 "$deb" "$OUT/.$(basename "$deb").tmp"
    mv -f "$OUT/.$(basename "$deb").tmp" "$OUT/$(basename "$deb")"
    log "  -> $OUT/$(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
}

build_pyxis() {
    local archive=$VENDOR/pyxis-$PYXIS_VERSION.tar.gz deb=nvslurm-plugin-pyxis_${PYXIS_VERSION}-1_${ARCH}.deb
    [[ -f $archive ]] || die "$archive is missing (the vendored release archive; see ../shared/vendor/README.md)"
    apt_install "${PYXIS_BUILD_DEPS[@]}"
    # Pyxis loads only into the Slurm whose spank.h it was built with.
    local want_slurm have_slurm
    want_slurm=$(sed -nE 's/^[[:space:]]+slurm:[[:space:]]*"?([0-9]+\.[0-9]+)"?.*/\1/p' "$SPEC" | head -n1)
    have_slurm=$(dpkg-query -W -f='${Version}' libslurm-dev)
    [[ -n $want_slurm && $have_slurm == "$want_slurm".* ]] ||
        die "libslurm-dev is $have_slurm but the lab spec's cluster.versions.slurm is '$want_slurm': Pyxis must be built against the Slurm the nodes run"
    local stamp
    stamp=$(inputs_of "$archive" "${PYXIS_BUILD_DEPS[@]}" gcc)
    if is_cached pyxis "$stamp" "$deb"; then
        log "pyxis $PYXIS_VERSION: cached ($OUT/$deb, libslurm-dev $have_slurm)"
        return 0
    fi
    local src logf=$CACHE/logs/pyxis.log t0=$SECONDS
    src=$(unpack "$archive" pyxis)
    log "pyxis $PYXIS_VERSION: dpkg-buildpackage -b in $src against libslurm-dev $have_slurm (log: $logf)"
    if ! (cd "$src" && nice -n 19 dpkg-buildpackage -us -uc -b) >"$logf" 2>&1; then
        tail -n 30 "$logf" >&2; die "pyxis build failed (log: $logf)"
    fi
    dpkg-deb -c "$(dirname "$src")/$deb" | grep "/usr/lib/$MULTIARCH/slurm/spank_pyxis.so$" >/dev/null ||
        die "$deb has no /usr/lib/$MULTIARCH/slurm/spank_pyxis.so"
    publish "$(dirname "$src")/$deb"
    printf '%s\n' "$stamp" >"$CACHE/.stamp-pyxis"
    rm -rf "$CACHE/build/pyxis"
    log "pyxis: built in $((SECONDS - t0)) s"
}

build_enroot() {
    local archive=$VENDOR/enroot-$ENROOT_VERSION.tar.gz
    local debs=("enroot_${ENROOT_VERSION}-1_${ARCH}.deb" "enroot+caps_${ENROOT_VERSION}-1_${ARCH}.deb")
    [[ -f $archive ]] || die "$archive is missing (the vendored release archive; see ../shared/vendor/README.md)"
    apt_install "${ENROOT_BUILD_DEPS[@]}"
    local stamp
    stamp=$(inputs_of "$archive" "${ENROOT_BUILD_DEPS[@]}" gcc)
    if is_cached enroot "$stamp" "${debs[@]}"; then
        log "enroot $ENROOT_VERSION: cached ($OUT/${debs[0]})"
        return 0
    fi
    local src logf=$CACHE/logs/enroot.log t0=$SECONDS d
    src=$(unpack "$archive" enroot)
    # `make clean` runs `git clean -f -d -x` in deps/*: never let it reach a repository
    # above the build directory.
    export GIT_CEILING_DIRECTORIES=$CACHE/build
    log "enroot $ENROOT_VERSION: stand-ins for its submodules (Debian's makeself $(dpkg-query -W -f='${Version}' makeself), linux-libc-dev $(dpkg-query -W -f='${Version}' linux-libc-dev))"
    install -m 0755 /usr/bin/makeself "$src/deps/makeself/makeself.sh"
    printf '%s\n' \
        '# railyard stand-in for the linux-headers submodule: Debian'"'"'s linux-libc-dev' \
        'install:' \
        "	install -d \$(prefix)/include && cp -a /usr/include/linux /usr/include/asm-generic /usr/include/$MULTIARCH/asm \$(prefix)/include/" \
        >"$src/deps/linux-headers/Makefile"
    log "enroot $ENROOT_VERSION: make deb's steps with FORCE_GLIBC=1: dh_make -t pkg/deb, dpkg-buildpackage -b (log: $logf)"
    if ! (
        cd "$src"
        export FORCE_GLIBC=1 DEBFULLNAME="NVIDIA CORPORATION" DEBEMAIL=cudatools@nvidia.com
        if dpkg --compare-versions "$GLIBC" lt 2.38; then
            export DEB_CPPFLAGS_APPEND="-D_GNU_SOURCE= -include bsd/string.h" LOADLIBES=-l:libbsd.so
        fi
        make clean
        dh_make -y -d -s -c apache -t "$src/pkg/deb" -p "enroot_$ENROOT_VERSION" --createorig
        cp -ar pkg/deb/source debian
        nice -n 19 dpkg-buildpackage -us -uc -b --host-type "$(uname -m)-linux-gnu"
    ) >"$logf" 2>&1; then
        tail -n 30 "$logf" >&2; die "enroot build failed (log: $logf)"
    fi
    dpkg-deb -c "$(dirname "$src")/${debs[0]}" | grep '/usr/bin/enroot$' >/dev/null || die "${debs[0]} has no /usr/bin/enroot"
    for d in "${debs[@]}"; do publish "$(dirname "$src")/$d"; done
    printf '%s\n' "$stamp" >"$CACHE/.stamp-enroot"
    rm -rf "$CACHE/build/enroot"
    log "enroot: built in $((SECONDS - t0)) s"
}

for p in $PACKAGES; do
    case $p in
        pyxis) build_pyxis ;;
        enroot) build_enroot ;;
        *) die "unknown package '$p' (enroot, pyxis)" ;;
    esac
done

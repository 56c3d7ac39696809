"""Build the lab node image offline: Debian 13 (trixie) + systemd, imported into podman.

No container registry is reachable, so the image is made from packages:
``debootstrap --variant=minbase`` from the Debian mirror this host's apt uses
(the host may run an older Debian: its archive URIs are reused for SUITE),
a few container tweaks, then ``tar | podman import``. The result is cached:
the image carries the label ``railyard.recipe=<sha256 of the recipe>`` and is
rebuilt only when the recipe (package list, suite, mirror, tweaks) changes.

    python -m railyard.lab.image [--force]

Needs root, podman and debootstrap (``scripts/setup-podman.sh`` installs them).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import glob
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from railyard.paths import exclusive_lock

IMAGE_NAME = "localhost/railyard-node"
IMAGE_TAG = "13"
IMAGE_REF = f"{IMAGE_NAME}:{IMAGE_TAG}"
RECIPE_LABEL = "railyard.recipe"

# Debian 13: Slurm 24.11.5, systemd 257. A bookworm host bootstraps it: bookworm's
# debian-archive-keyring (2023.3+deb12u2) holds the trixie keys, and the trixie
# Release files are also signed with the bookworm keys (checked with gpgv).
SUITE = "trixie"
VARIANT = "minbase"
ARCH_DEFAULT = "amd64"
# Bump to force a rebuild everywhere. (Edits to the build functions already change
# the recipe: their syntax trees are part of it, see recipe().)
RECIPE_REVISION = 1

# What every lab node gets. systemd/systemd-sysv: PID 1 is /sbin/init. dbus: hostnamectl,
# timedatectl, loginctl and ansible's hostname/systemd modules talk to systemd over D-Bus.
# python3 + python3-apt: Ansible modules, the apt module in particular. ca-certificates:
# apt and curl against https package sources that roles configure. netbase: /etc/services
# and /etc/protocols (getservbyname in daemons). iputils-ping: reachability checks.
PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-apt",
    "systemd",
    "systemd-sysv",
    "dbus",
    "iproute2",
    "iputils-ping",
    "procps",
    "sudo",
    "ca-certificates",
    "netbase",
)

# Units masked in the image. Empty on purpose: Debian 13's systemd 257 (like 12's 252)
# detects the container and skips what cannot work (udev, getty, kernel mounts,
# remount-fs); with nothing masked it reaches "running" under plain `podman run IMAGE`
# (on this host's cgroup v1 it marks itself "tainted: cgroupsv1"). Mask here only what
# is shown to fail.
MASKED_UNITS: tuple[str, ...] = ()

# Files whose file capabilities are dropped: podman's default capability set has no
# NET_RAW, and exec of a binary whose file capabilities exceed the bounding set fails
# ("exec /usr/bin/ping: operation not permitted"). ping works without it for root
# through ICMP datagram sockets (podman sets net.ipv4.ping_group_range=0 0).
STRIP_FILE_CAPS: tuple[str, ...] = ("usr/bin/ping",)

# Keep later `apt-get install`s small (like Debian's slim container images): no man
# pages, info or translations. /usr/share/doc is NOT excluded for later installs: roles
# may read shipped examples there (as on a real host); the base image's docs are removed
# at build time (copyright files stay).
DPKG_EXCLUDES = """\
# railyard lab image: no man pages, info or translations
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
"""

# apt settings carried over from the host, so containers fetch the way the host does
# (e.g. a snapshot mirror whose Release files are past Valid-Until, or a proxy).
HOST_APT_SETTINGS: tuple[str, ...] = (
    "Acquire::Check-Valid-Until",
    "Acquire::Check-Date",
    "Acquire::http::Proxy",
    "Acquire::https::Proxy",
    "Acquire::Retries",
    "Acquire::ForceIPv4",
)
IMAGE_APT_CONF = 'Acquire::Languages "none";\n'

# podman import --change instructions (no LABEL here: the recipe label is added at build).
IMAGE_CHANGES: tuple[str, ...] = (
    'CMD ["/sbin/init"]',  # exec form: PID 1 must be systemd, not sh -c
    "STOPSIGNAL SIGRTMIN+3",
    "ENV LANG=C.UTF-8",
    "ENV container=podman",
    "WORKDIR /root",
)

DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEBOOTSTRAP_CACHE = Path("/var/cache/railyard/debootstrap")
BUILD_PARENT = Path("/var/tmp")
LOCK_PATH = Path(tempfile.gettempdir()) / "railyard-lab-image.lock"

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"railyard.lab.image: {msg}", file=sys.stderr, flush=True)


class ImageBuildError(RuntimeError):
    """The lab image could not be built; the message says why and what to do."""


# --------------------------------------------------------------------------- mirror


@dataclass
class AptSource:
    """One apt source entry (deb822 view of it)."""

    uri: str
    suites: list[str]
    components: list[str]
    signed_by: str | None = None
    trusted: bool = False
    architectures: list[str] = field(default_factory=list)

    def deb822(self) -> str:
        lines = [
            "Types: deb",
            f"URIs: {self.uri}",
            f"Suites: {' '.join(self.suites)}",
            f"Components: {' '.join(self.components)}",
        ]
        if self.architectures:
            lines.append(f"Architectures: {' '.join(self.architectures)}")
        if self.trusted:
            lines.append("Trusted: yes")
        if self.signed_by:
            lines.append(f"Signed-By: {self.signed_by}")
        return "\n".join(lines) + "\n"


def _parse_deb822(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
            continue
        if raw[0] in " \t" and key:  # continuation line
            cur[key] += "\n" + raw.strip()
            continue
        if ":" in raw:
            key, _, val = raw.partition(":")
            key = key.strip().lower()
            cur[key] = val.strip()
    if cur:
        stanzas.append(cur)
    return stanzas


def _parse_one_line(text: str) -> list[dict[str, str]]:
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        kind, words = words[0], words[1:]
        opts: dict[str, str] = {}
        if words and words[0].startswith("["):
            opt_words = []
            while words:
                w = words.pop(0)
                opt_words.append(w.strip("[]"))
                if w.endswith("]"):
                    break
            for ow in " ".join(opt_words).split():
                k, _, v = ow.partition("=")
                opts[k.lower()] = v
        if len(words) < 2:
            continue
        entry = {
            "types": kind,
            "uris": words[0],
            "suites": words[1],
            "components": " ".join(words[2:]),
        }
        if "signed-by" in opts:
            entry["signed-by"] = opts["signed-by"]
        if "trusted" in opts:
            entry["trusted"] = opts["trusted"]
        if "arch" in opts:
            entry["architectures"] = opts["arch"].replace(",", " ")
        out.append(entry)
    return out


def host_codename(os_release: Path = Path("/etc/os-release")) -> str | None:
    """The host's Debian codename (VERSION_CODENAME in os-release), or None."""
    try:
        text = os_release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, val = line.partition("=")
        if key.strip() == "VERSION_CODENAME":
            return val.strip().strip("\"'") or None
    return None


def _suite_family(suite: str) -> set[str]:
    return {suite, f"{suite}-updates", f"{suite}-security"}


def _debian_entries(entries: list[dict[str, str]], wanted: set[str]) -> list[AptSource]:
    sources: list[AptSource] = []
    for e in entries:
        if e.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        if "deb" not in e.get("types", "").split():
            continue
        suites = [s for s in e.get("suites", "").split() if s in wanted]
        comps = e.get("components", "").split()
        if not suites or "main" not in comps:
            continue
        for uri in e.get("uris", "").split():
            sources.append(
                AptSource(
                    uri=uri.rstrip("/"),
                    suites=suites,
                    components=comps,
                    signed_by=e.get("signed-by") or None,
                    trusted=e.get("trusted", "no").lower() in ("yes", "true", "1"),
                    architectures=e.get("architectures", "").split(),
                )
            )
    return sources


def host_debian_sources(
    suite: str = SUITE,
    apt_dir: Path = Path("/etc/apt"),
    host_suite: str | None = None,
) -> list[AptSource]:
    """apt entries for ``suite``, ``suite-updates`` and ``suite-security`` from the host's.

    Reads sources.list and sources.list.d/*.list|*.sources the way apt does (files with
    other extensions are ignored, as are disabled stanzas and deb-src). When the host
    lists ``suite`` itself, those entries are used. Otherwise (a Debian 12 host building
    the Debian 13 image) the host's own Debian entries (``host_suite``, by default the
    host's VERSION_CODENAME) are reused with the suite names swapped: same archives,
    same keyring, same options. Override with RAILYARD_DEBIAN_MIRROR=<uri> (one archive
    for the suite and -updates, no security).
    """
    override = os.environ.get("RAILYARD_DEBIAN_MIRROR")
    if override:
        return [
            AptSource(
                uri=override.rstrip("/"), suites=[suite, f"{suite}-updates"], components=["main"]
            )
        ]
    entries: list[dict[str, str]] = []
    one_line = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for p in one_line:
        if p.is_file():
            entries += _parse_one_line(p.read_text(encoding="utf-8", errors="replace"))
    for p in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        entries += _parse_deb822(p.read_text(encoding="utf-8", errors="replace"))
    sources = _debian_entries(entries, _suite_family(suite))
    if not any(suite in s.suites for s in sources):
        host = host_suite if host_suite is not None else host_codename()
        if host and host != suite:
            sources = _debian_entries(entries, _suite_family(host))
            for s in sources:
                s.suites = [suite + x[len(host):] for x in s.suites]
    if not any(suite in s.suites for s in sources):
        raise ImageBuildError(
            f"no apt source for Debian '{suite}' (or the host's own release, to reuse for "
            f"it; component main) found in {apt_dir}; set RAILYARD_DEBIAN_MIRROR=<archive URI>"
        )
    return sources


def host_apt_settings() -> dict[str, str]:
    """Host apt options from HOST_APT_SETTINGS that are set (``apt-config dump``)."""
    try:
        dump = subprocess.run(
            ["apt-config", "dump"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    found = {}
    for line in dump.splitlines():
        key, _, val = line.partition(" ")
        if key in HOST_APT_SETTINGS:
            found[key] = val.strip().rstrip(";").strip('"')
    return found


# --------------------------------------------------------------------------- recipe


def _arch() -> str:
    try:
        return subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ARCH_DEFAULT


def _build_code_hash() -> str:
    """Hash of the build functions' syntax trees: code changes count, comments and
    formatting do not."""
    trees = [
        ast.dump(ast.parse(textwrap.dedent(inspect.getsource(f))))
        for f in (_debootstrap, _configure_rootfs, _import)
    ]
    return hashlib.sha256("\n".join(trees).encode()).hexdigest()


def recipe() -> dict:
    """Everything that decides the image's content. Its hash is the cache key."""
    sources = host_debian_sources()
    return {
        "revision": RECIPE_REVISION,
        "suite": SUITE,
        "variant": VARIANT,
        "arch": _arch(),
        "packages": sorted(PACKAGES),
        "masked_units": sorted(MASKED_UNITS),
        "strip_file_caps": sorted(STRIP_FILE_CAPS),
        "dpkg_excludes": DPKG_EXCLUDES,
        "apt_conf": IMAGE_APT_CONF,
        "host_apt_settings": host_apt_settings(),
        "sources": [s.deb822() for s in sources],
        "changes": list(IMAGE_CHANGES),
        "build_code": _build_code_hash(),
    }


def recipe_hash(r: dict | None = None) -> str:
    blob = json.dumps(recipe() if r is None else r, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


# --------------------------------------------------------------------------- podman


def _podman(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, **kw)


def image_info(ref: str = IMAGE_REF) -> dict | None:
    """``podman image inspect`` of ``ref`` as a dict, or None when there is no such image."""
    proc = _podman("image", "inspect", ref, check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def image_recipe_label(ref: str = IMAGE_REF) -> str | None:
    info = image_info(ref)
    if not info:
        return None
    labels = info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}
    return labels.get(RECIPE_LABEL)


def _require_tools() -> None:
    missing = [t for t in ("podman", "debootstrap", "tar") if shutil.which(t) is None]
    if missing:
        raise ImageBuildError(
            f"missing {', '.join(missing)}: run scripts/setup-podman.sh (as root) first"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("building the lab image needs root (debootstrap, rootful podman)")


# --------------------------------------------------------------------------- rootfs


def _mounts_under(root: Path) -> list[str]:
    root_s = str(root.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == root_s or mnt.startswith(root_s + "/"):
                found.append(mnt)
    return found


def _remove_rootfs(root: Path, log: Log) -> None:
    """Delete the debootstrap tree, but never through a mount debootstrap left behind."""
    if not root.exists():
        return
    for mnt in sorted(_mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mnt], check=False)
    left = _mounts_under(root)
    if left:
        log(f"NOT removing {root}: still mounted: {', '.join(left)}")
        return
    shutil.rmtree(root, ignore_errors=True)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():  # replace the link, never write through it to the host
        path.unlink()
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def _rm(p: Path, root: Path) -> None:
    """Remove a file, symlink or directory tree inside root; never follows a symlink.

    The parent is resolved on the host, so a rootfs symlink that points outside the
    rootfs (an absolute link resolves against the host's /) is refused, not followed.
    """
    real_root = os.path.realpath(root)
    if not os.path.realpath(p.parent).startswith(real_root + os.sep):
        raise ImageBuildError(f"refusing to delete {p}: resolves outside {root}")
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _rm_glob(root: Path, pattern: str) -> None:
    for p in glob.glob(str(root / pattern.lstrip("/"))):
        _rm(Path(p), root)


def _debootstrap(root: Path, sources: list[AptSource], log: Log) -> None:
    main = next(s for s in sources if SUITE in s.suites)
    DEBOOTSTRAP_CACHE.mkdir(parents=True, exist_ok=True)
    cmd = [
        "debootstrap",
        f"--variant={VARIANT}",
        f"--arch={_arch()}",
        "--components=" + ",".join(main.components),
        "--include=" + ",".join(PACKAGES),
        f"--cache-dir={DEBOOTSTRAP_CACHE}",
    ]
    if main.signed_by and Path(main.signed_by).is_file():
        cmd.append(f"--keyring={main.signed_by}")
    elif main.trusted:
        cmd.append("--no-check-gpg")
    cmd += [SUITE, str(root), main.uri]
    log(" ".join(cmd))
    logfile = root.parent / (root.name + ".debootstrap.log")
    with open(logfile, "w") as out:
        proc = subprocess.run(
            cmd,
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    if proc.returncode != 0:
        tail = logfile.read_text(errors="replace").splitlines()[-25:]
        inner = root / "debootstrap" / "debootstrap.log"
        if inner.is_file():
            tail += ["--- debootstrap/debootstrap.log:"]
            tail += inner.read_text(errors="replace").splitlines()[-25:]
        raise ImageBuildError(f"debootstrap failed (exit {proc.returncode}):\n" + "\n".join(tail))
    logfile.unlink(missing_ok=True)


def _configure_rootfs(root: Path, sources: list[AptSource]) -> None:
    # apt: the host's Debian sources, in deb822 form; keyrings the image lacks come along.
    _rm_glob(root, "etc/apt/sources.list")
    for s in sources:
        if s.signed_by and s.signed_by.startswith("/") and Path(s.signed_by).is_file():
            dest = root / s.signed_by.lstrip("/")
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(s.signed_by, dest)
    _write(root / "etc/apt/sources.list.d/debian.sources", "\n".join(s.deb822() for s in sources))
    settings = host_apt_settings()
    _write(
        root / "etc/apt/apt.conf.d/90railyard",
        IMAGE_APT_CONF + "".join(f'{k} "{v}";\n' for k, v in sorted(settings.items())),
    )
    _write(root / "etc/dpkg/dpkg.cfg.d/90railyard-excludes", DPKG_EXCLUDES)

    # Per-container identity is made at start: systemd fills an empty machine-id,
    # podman provides hostname, hosts and resolv.conf.
    _write(root / "etc/machine-id", "", 0o444)
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.symlink_to("/etc/machine-id")
    for f in ("etc/hostname", "etc/resolv.conf"):
        _rm_glob(root, f)
    _write(root / "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")

    # systemd: boot to multi-user, mask what a container cannot do.
    sysd = root / "etc/systemd/system"
    sysd.mkdir(parents=True, exist_ok=True)
    default = sysd / "default.target"
    if default.exists() or default.is_symlink():
        default.unlink()
    default.symlink_to("/lib/systemd/system/multi-user.target")
    for unit in MASKED_UNITS:
        link = sysd / unit
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to("/dev/null")

    for rel in STRIP_FILE_CAPS:
        with contextlib.suppress(OSError):  # absent file or no capability set
            os.removexattr(root / rel, "security.capability", follow_symlinks=False)

    # Size: the base packages' docs (copyright files stay), man pages, translations;
    # then caches, lists, logs.
    for doc in (root / "usr/share/doc").iterdir():
        if doc.is_dir() and not doc.is_symlink():
            for q in doc.iterdir():
                if q.name != "copyright":
                    _rm(q, root)
    for pattern in (
        "usr/share/man/*",
        "usr/share/info/*",
        "usr/share/locale/*",
        "usr/share/lintian/*",
    ):
        for p in glob.glob(str(root / pattern)):
            if not p.endswith("/locale.alias"):
                _rm(Path(p), root)
    for pattern in (
        "var/lib/apt/lists/*",
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/cache/apt/archives/partial/*",
        "var/cache/debconf/*-old",
        "var/lib/dpkg/*-old",
        "var/log/*.log",
        "var/log/apt/*",
        "tmp/*",
        "var/tmp/*",
        "root/.bash_history",
    ):
        _rm_glob(root, pattern)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    # Emptied lists must not look fresh: ansible's apt module takes the mtime of
    # /var/lib/apt/lists as the last update, so `update_cache: true` with
    # `cache_valid_time` would skip the update and find no packages.
    _rm_glob(root, "var/lib/apt/periodic/update-success-stamp")
    os.utime(root / "var/lib/apt/lists", (0, 0))


def _import(root: Path, label: str, log: Log) -> str:
    changes = [*IMAGE_CHANGES, f"LABEL {RECIPE_LABEL}={label}"]
    cmd = ["podman", "import", "--quiet"]
    for ch in changes:
        cmd += ["--change", ch]
    cmd += ["--message", f"railyard lab node, debootstrap {VARIANT} {SUITE}", "-", IMAGE_REF]
    log(f"tar -C {root} -c . | podman import - {IMAGE_REF}")
    tar = subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "--xattrs", "--xattrs-include=*", "-c", "."],
        stdout=subprocess.PIPE,
    )
    try:
        imp = subprocess.run(cmd, check=False, stdin=tar.stdout, capture_output=True, text=True)
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar_rc = tar.wait()
    if tar_rc != 0 or imp.returncode != 0:
        raise ImageBuildError(
            f"tar (exit {tar_rc}) | podman import (exit {imp.returncode}) failed: "
            f"{imp.stderr.strip()}"
        )
    return imp.stdout.strip()


# --------------------------------------------------------------------------- public


@dataclass
class EnsureResult:
    ref: str
    image_id: str
    recipe: str
    built: bool
    seconds: float
    size_bytes: int | None


def ensure(force: bool = False, log: Log = _stderr) -> EnsureResult:
    """Make sure IMAGE_REF exists and matches the current recipe; build it if not."""
    t0 = time.monotonic()
    if shutil.which("podman") is None:
        raise ImageBuildError("podman is not installed: run scripts/setup-podman.sh first")
    want = recipe_hash()
    with exclusive_lock(LOCK_PATH):
        info = image_info()
        have = ((info or {}).get("Labels") or {}).get(RECIPE_LABEL) if info else None
        if info and have == want and not force:
            return EnsureResult(
                IMAGE_REF, info["Id"], want, False, time.monotonic() - t0, info.get("Size")
            )
        if info is None:
            log(f"{IMAGE_REF} not present: building")
        elif force:
            log(f"{IMAGE_REF} rebuild forced")
        else:
            log(f"{IMAGE_REF} recipe changed ({(have or 'none')[:12]} -> {want[:12]}): rebuilding")
        _require_tools()
        sources = host_debian_sources()
        BUILD_PARENT.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="railyard-rootfs-", dir=BUILD_PARENT))
        try:
            t = time.monotonic()
            _debootstrap(root, sources, log)
            log(f"debootstrap done in {time.monotonic() - t:.1f} s")
            _configure_rootfs(root, sources)
            t = time.monotonic()
            new_id = _import(root, want, log)
            log(f"import done in {time.monotonic() - t:.1f} s")
        finally:
            _remove_rootfs(root, log)
        if info and info["Id"] != new_id and not new_id.startswith(info["Id"]):
            # The old image is now untagged; drop it unless a container still uses it.
            _podman("rmi", info["Id"], check=False)
        new = image_info() or {}
        return EnsureResult(
            IMAGE_REF, new.get("Id", new_id), want, True, time.monotonic() - t0, new.get("Size")
        )


def ensure_image(force: bool = False) -> str:
    """Return the lab node image reference, building the image first if needed."""
    return ensure(force=force).ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m railyard.lab.image",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if the recipe matches")
    ap.add_argument(
        "--print-recipe", action="store_true", help="print the recipe and its hash, build nothing"
    )
    args = ap.parse_args(argv)
    if args.print_recipe:
        r = recipe()
        print(json.dumps(r, indent=2, sort_keys=True))
        print(f"sha256: {recipe_hash(r)}")
        return 0
    try:
        res = ensure(force=args.force)
    except ImageBuildError as exc:
        print(f"railyard.lab.image: ERROR: {exc}", file=sys.stderr)
        return 1
    size = f"{res.size_bytes / 1e6:.0f} MB" if res.size_bytes else "size unknown"
    what = "built" if res.built else "up to date, reused"
    print(
        f"{res.ref} {what} in {res.seconds:.1f} s: id {res.image_id[:12]}, {size}, "
        f"{RECIPE_LABEL}={res.recipe[:12]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lab driver: a node is a podman container running systemd, a network is a podman network.

What this machine needs (found by trying, see DESIGN.md "The lab"):

* ``--systemd=always`` with ``/sbin/init``: podman mounts /run, /tmp and the cgroup tree the
  way systemd wants; runc works on this cgroup v1 hybrid host, crun does not.
* ``--no-hosts`` and DNS names on the management network only: with podman's generated
  /etc/hosts and a rail network attached, a node's name resolves to its rail address
  first, and aardvark-dns answers with the rail address for peers on a shared rail.
* rail networks are ``--internal --disable-dns``: the fabric shows in ``ip addr`` (``rail0``,
  ``rail1``...) without taking part in naming or routing.
* stand-in GPUs are ``--device /dev/null:/dev/nvidiaN``: a real, openable character device.
* podman 4.3 deadlocks when two containers sharing a named volume are set up at once
  (podman#20313, setupContainer against lockNamedVolume; every podman command then hangs):
  nodes with volumes are created, started and removed one at a time, under a host-wide lock.

Every container, network and volume carries ``railyard.cluster=<cluster>`` so
:func:`cleanup` finds all of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from railyard.drivers.base import DriverError, Log, NodeState, PodmanNode, quiet
from railyard.paths import exclusive_lock

# The host's inotify limits, shared by every node container: rootful podman runs them all as
# root of one user namespace, and fs.inotify.max_user_instances counts per user. systemd,
# dbus, the kubelet, containerd, kube-proxy, the apiserver, Kueue and Volcano each hold
# some; at Debian's default of 128 a lab of ten nodes beside a molecule scenario runs out,
# and the daemon that starts last fails with `too many open files` (kube-proxy and Kueue
# exit; systemd restarts them until something else lets go). kind asks for 512 and 524288.
INOTIFY_MINIMUM = {"max_user_instances": 1024, "max_user_watches": 524288}
INOTIFY_SETUP = "scripts/setup-podman.sh"  # sets them, and keeps them in /etc/sysctl.d

CLUSTER_LABEL = "railyard.cluster"
NODE_LABEL = "railyard.node"
CONFIG_LABEL = "railyard.config"
BOOT_TIMEOUT = 90.0


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    name: str
    cluster: str
    subnet: str = ""  # empty: podman picks a free one
    gateway: str = ""
    internal: bool = False
    dns: bool = True


# --------------------------------------------------------------------------- host


def host_problems(proc_sys: Path = Path("/proc/sys")) -> list[str]:
    """What this host lacks to run node containers, each with its fix; [] when nothing."""
    problems = []
    for key, minimum in INOTIFY_MINIMUM.items():
        path = proc_sys / "fs" / "inotify" / key
        try:
            value = int(path.read_text().strip())
        except (OSError, ValueError):
            continue  # not Linux, or not readable: podman will say what is wrong
        if value < minimum:
            problems.append(
                f"fs.inotify.{key} is {value} on this host, below the {minimum} that node containers need: "
                "every process in them takes its inotify instances and watches from root's one limit, and "
                "past it daemons fail with `too many open files`. Raise it with "
                f"`sysctl -w fs.inotify.{key}={minimum}` ({INOTIFY_SETUP} does, and keeps it across reboots)")
    return problems


# --------------------------------------------------------------------------- pure


def config_hash(node: PodmanNode) -> str:
    """Changes exactly when the container would be created differently."""
    blob = json.dumps(asdict(node), sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def run_args(node: PodmanNode) -> list[str]:
    """The ``podman run`` arguments for a node (without ``podman run``)."""
    args = [
        "-d",
        "--name", node.container,
        "--hostname", node.name,
        "--label", f"{CLUSTER_LABEL}={node.cluster}",
        "--label", f"{NODE_LABEL}={node.name}",
        "--label", f"{CONFIG_LABEL}={config_hash(node)}",
        "--systemd=always",
        "--no-hosts",
    ]
    for key, value in node.labels:
        args += ["--label", f"{key}={value}"]
    for att in node.attachments:
        opts = [f"interface_name={att.interface}"]
        if att.ip:
            opts.append(f"ip={att.ip}")
        opts += [f"alias={a}" for a in att.aliases]
        args += ["--network", f"{att.network}:{','.join(opts)}"]
    if node.privileged:
        args.append("--privileged")
    for dev in node.devices:
        args += ["--device", f"/dev/null:{dev}:rwm"]
    for vol in node.volumes:
        args += ["--volume", f"{vol.name}:{vol.path}"]
    return [*args, node.image, "/sbin/init"]


def network_args(net: NetworkSpec) -> list[str]:
    """The ``podman network create`` arguments (without ``podman network create``)."""
    args = ["--label", f"{CLUSTER_LABEL}={net.cluster}"]
    if net.subnet:
        args += ["--subnet", net.subnet]
    if net.gateway:
        args += ["--gateway", net.gateway]
    if net.internal:
        args.append("--internal")
    if not net.dns:
        args.append("--disable-dns")
    return [*args, net.name]


# --------------------------------------------------------------------------- podman


def _podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which("podman") is None:
        raise DriverError("podman is not installed: run scripts/setup-podman.sh (as root) first")
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise DriverError(f"podman {' '.join(args[:2])} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


def _inspect(kind: str, name: str) -> dict[str, Any] | None:
    proc = _podman(kind, "inspect", "--format", "json", name, check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def _remove_container(name: str, tries: int = 3) -> None:
    """``podman rm --force``, again if needed: podman 4.3 can fail when the container stops
    during its stop timeout ("could not be stopped ... container state improper: stopped")."""
    for attempt in range(tries):
        proc = _podman("rm", "--force", "--time", "2", name, check=False)
        if proc.returncode == 0 or _inspect("container", name) is None:
            return
        if attempt == tries - 1:
            raise DriverError(f"podman rm {name} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        time.sleep(1)


def volume_lock_path() -> Path:
    """One lock for the whole host: the lab's nodes come up from parallel Pulumi steps,
    and molecule or a second stack may run podman beside them."""
    base = Path("/run/lock") if os.access("/run/lock", os.W_OK) else Path(tempfile.gettempdir())
    return base / "railyard-podman-volumes.lock"


@contextlib.contextmanager
def _volume_lock(node: PodmanNode) -> Iterator[None]:
    """Held while a node with named volumes is created, started or removed (podman#20313)."""
    if not node.volumes:
        yield
        return
    with exclusive_lock(volume_lock_path()):
        yield


def _storage_leftovers(prefix: str) -> list[str]:
    """Containers in storage that podman does not manage (``ps --external``, status
    "Storage"): what a podman run killed half-way leaves; they keep their name taken."""
    proc = _podman("ps", "-a", "--external", "--format", "{{.Names}}\t{{.Status}}", check=False)
    rows = (line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)
    return [name for name, status in rows if name.startswith(prefix) and status == "Storage"]


def _remove_storage_leftover(name: str) -> bool:
    if name not in _storage_leftovers(name):
        return False
    return _podman("rm", "--storage", name, check=False).returncode == 0


def _labels(info: dict[str, Any]) -> dict[str, str]:
    """Containers say Config.Labels, volumes Labels, networks labels."""
    return info.get("Labels") or info.get("labels") or (info.get("Config") or {}).get("Labels") or {}


class PodmanDriver:
    def observe(self, node: PodmanNode) -> NodeState:
        info = _inspect("container", node.container)
        if info is None:
            return NodeState(exists=False, power="off", detail="no such container")
        status = (info.get("State") or {}).get("Status", "unknown")
        running = status == "running"
        reachable = running and _podman("exec", node.container, "true", check=False, timeout=30).returncode == 0
        return NodeState(
            exists=True,
            power="on" if running else "off",
            reachable=reachable,
            detail=status,
            instance=info.get("Id", ""),
        )

    def ensure_up(self, node: PodmanNode, log: Log = quiet) -> NodeState:
        info = _inspect("container", node.container)
        if info is not None:
            labels = _labels(info)
            if labels.get(CLUSTER_LABEL) != node.cluster:
                raise DriverError(
                    f"container {node.container} exists but is not part of cluster {node.cluster} "
                    f"(label {CLUSTER_LABEL}={labels.get(CLUSTER_LABEL)!r}); remove or rename it"
                )
            if labels.get(CONFIG_LABEL) != config_hash(node):
                log(f"{node.container}: created with other settings; recreating it")
                self.ensure_absent(node, log, keep_volumes=True)
                info = None
        if info is None:
            self._ensure_image(node, log)
            with _volume_lock(node):
                self._create(node, log)
        elif (info.get("State") or {}).get("Status") != "running":
            log(f"{node.container}: starting the stopped container")
            with _volume_lock(node):
                _podman("start", node.container)
        self._wait_for_systemd(node, log)
        return self.observe(node)

    @staticmethod
    def _create(node: PodmanNode, log: Log) -> None:
        for vol in node.volumes:
            if _inspect("volume", vol.name) is None:
                # Nodes share volumes (NFS clients mount their server's); a podman outside
                # railyard may still create it between the look and the create.
                made = _podman("volume", "create", "--label", f"{CLUSTER_LABEL}={node.cluster}",
                               "--label", f"{NODE_LABEL}={vol.owner or node.name}", vol.name, check=False)
                if made.returncode != 0 and _inspect("volume", vol.name) is None:
                    raise DriverError(f"podman volume create {vol.name} failed: {made.stderr.strip()}")
        log(f"{node.container}: podman run ({node.image})")
        made = _podman("run", *run_args(node), check=False)
        if made.returncode != 0 and _remove_storage_leftover(node.container):
            # A podman run killed half-way (a timeout, a deadlock) leaves the name taken by
            # a container podman itself no longer lists: gone now, so run again.
            log(f"{node.container}: removed a half-created container left by an earlier run")
            made = _podman("run", *run_args(node), check=False)
        if made.returncode != 0:
            raise DriverError(f"podman run {node.container} failed (exit {made.returncode}): {made.stderr.strip()}")

    def ensure_absent(self, node: PodmanNode, log: Log = quiet, keep_volumes: bool = False) -> None:
        with _volume_lock(node):
            if _inspect("container", node.container) is not None:
                log(f"{node.container}: removing the container")
                _remove_container(node.container)
            if not keep_volumes:
                # Volumes are shared (the lab's NFS clients mount their server's): whoever
                # leaves a volume unused removes it, the owner or the last of the others.
                # Never --force: that removes the containers using it.
                for vol in node.volumes:
                    users = _podman("ps", "-a", "-q", "--filter", f"volume={vol.name}", check=False)
                    if users.returncode == 0 and not users.stdout.strip():
                        _podman("volume", "rm", vol.name, check=False)

    @staticmethod
    def _ensure_image(node: PodmanNode, log: Log) -> None:
        if _podman("image", "exists", node.image, check=False).returncode == 0:
            return
        from railyard.lab.image import IMAGE_REF, ensure_image

        if node.image != IMAGE_REF:
            raise DriverError(f"image {node.image} not found; build or pull it first")
        log(f"{node.image} missing: building it (railyard.lab.image, about a minute)")
        ensure_image()

    @staticmethod
    def _wait_for_systemd(node: PodmanNode, log: Log, timeout: float = BOOT_TIMEOUT) -> None:
        """Ansible's systemd and service tasks need PID 1 done booting."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            proc = _podman("exec", node.container, "systemctl", "is-system-running", "--wait",
                           check=False, timeout=timeout)
            state = proc.stdout.strip()
            if state in ("running", "degraded"):
                if state == "degraded":
                    log(f"{node.container}: systemd is degraded (a unit failed); continuing")
                return
            time.sleep(0.5)
        raise DriverError(
            f"{node.container}: systemd did not finish booting within {timeout:.0f}s (state {state!r}); "
            f"see `podman logs {node.container}`"
        )


# --------------------------------------------------------------------------- networks


def observe_network(name: str) -> dict[str, Any] | None:
    return _inspect("network", name)


def ensure_network(net: NetworkSpec, log: Log = quiet) -> dict[str, Any]:
    info = observe_network(net.name)
    if info is not None:
        owner = _labels(info).get(CLUSTER_LABEL)
        if owner != net.cluster:
            raise DriverError(
                f"podman network {net.name} exists but is not part of cluster {net.cluster} "
                f"(label {CLUSTER_LABEL}={owner!r}); remove it or rename the cluster"
            )
        return info
    log(f"podman network create {net.name}")
    _podman("network", "create", *network_args(net))
    created = observe_network(net.name)
    assert created is not None
    return created


def remove_network(name: str, log: Log = quiet) -> None:
    if observe_network(name) is None:
        return
    log(f"podman network rm {name}")
    _podman("network", "rm", name)  # never --force: that would remove containers too


def network_subnet(info: dict[str, Any]) -> str:
    subnets = info.get("subnets") or []
    return subnets[0].get("subnet", "") if subnets else ""


# --------------------------------------------------------------------------- cleanup


def labelled(kind: str, cluster: str) -> list[str]:
    """Names of the containers, networks or volumes of a cluster."""
    fmt = {"container": "{{.Names}}", "network": "{{.Name}}", "volume": "{{.Name}}"}[kind]
    sub = ["ps", "-a"] if kind == "container" else [kind, "ls"]
    proc = _podman(*sub, "--filter", f"label={CLUSTER_LABEL}={cluster}", "--format", fmt)
    return sorted(line for line in proc.stdout.split() if line)


def cleanup(cluster: str, log: Log = quiet) -> None:
    """Remove everything labelled with the cluster: the lab's last resort, and the tests'."""
    for name in labelled("container", cluster):
        log(f"removing container {name}")
        _remove_container(name)
    for name in _storage_leftovers(f"railyard-{cluster}-"):
        log(f"removing half-created container {name}")
        _podman("rm", "--storage", name, check=False)
    for name in labelled("network", cluster):
        log(f"removing network {name}")
        _podman("network", "rm", name, check=False)
    for name in labelled("volume", cluster):
        log(f"removing volume {name}")
        _podman("volume", "rm", "--force", name, check=False)

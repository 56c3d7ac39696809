"""The Pyxis/Enroot container checks, one set for the two clusters that run them.

The molecule scenario ``molecule/slurm_cluster`` (the roles on six containers) and the
Pulumi lab (``tests/deploy/test_lab_stack.py``) both run these against real slurmd,
slurmstepd, Pyxis and Enroot. Each caller says how its nodes are reached (the podman
container of a node) and where its compute nodes find the image; the expectations are
literals and the image's own ID, never what the compiler rendered.

The image is the one ``scripts/build-container-image.sh`` builds offline from Debian's
busybox-static (no registry serves images here); its os-release says ``ID=railyard-busybox``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

IMAGE_ID = "railyard-busybox"  # what scripts/build-container-image.sh writes into /etc/os-release
BUILT_IMAGE = Path(os.environ.get("RAILYARD_IMAGES_DIR", "/var/cache/railyard/images")) / "busybox.sqsh"
NODE_OS = 'echo "$(hostname) $(. /etc/os-release; echo $ID)"'


@dataclass(frozen=True)
class Cluster:
    login: str  # the login node's podman container
    compute: Sequence[str]  # the compute nodes' names, as Slurm knows them
    container: Callable[[str], str]  # a node's name -> its podman container
    image: str  # the squashfs every compute node can read at this path

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], check=False, capture_output=True, text=True, timeout=180)

    def on_login(self, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """Run argv on the login node; the process and its wall time (podman exec included)."""
        t0 = time.monotonic()
        proc = self.podman("exec", self.login, *argv)
        return proc, round(time.monotonic() - t0, 2)

    def on_node(self, node: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.container(node), *argv)


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> str:
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def runs_on_every_node(c: Cluster) -> tuple[float, float]:
    """`srun -N<all> --container-image` runs in the image on every compute node (its
    os-release, not the node's Debian), and the same step without it runs on the nodes.
    Returns the wall times of both, containerized first."""
    n = f"-N{len(c.compute)}"
    proc, t_container = c.on_login("srun", n, f"--container-image={c.image}", "sh", "-c", NODE_OS)
    got = sorted(_ok(proc, f"srun {n} --container-image").splitlines())
    assert got == sorted(f"{node} {IMAGE_ID}" for node in c.compute), got
    plain, t_plain = c.on_login("srun", n, "sh", "-c", NODE_OS)
    got = sorted(_ok(plain, f"srun {n}").splitlines())
    assert got == sorted(f"{node} debian" for node in c.compute), got
    return t_container, t_plain


def mounts_bring_home_in(c: Cluster, token: str, path: str = "/home/railyard-pyxis/token") -> None:
    """`--container-mounts=/home:/home` shows the node's /home in the container, on every
    compute node; without it the container's own (empty) /home has no such file. The caller
    has written *token* to *path* where the compute nodes see it."""
    n = f"-N{len(c.compute)}"
    proc, _ = c.on_login("srun", n, f"--container-image={c.image}", "--container-mounts=/home:/home", "cat", path)
    assert _ok(proc, "srun --container-mounts").split() == [token] * len(c.compute)
    without, _ = c.on_login("srun", "-N1", f"--container-image={c.image}", "cat", path)
    assert without.returncode != 0, f"without --container-mounts the container must not see {path}: {without.stdout}"


def named_container_persists_and_is_reused(c: Cluster, name: str) -> None:
    """A named container keeps what one step wrote for the next step of the same job (the
    second step names no image), and with Pyxis' container_scope=global the next job on that
    node starts from it: slurmd's log says Pyxis reused the filesystem and created none."""
    node = c.compute[0]
    image = f"--container-image={c.image}"
    job = (f"srun --container-name={name} {image} --container-writable sh -c 'echo kept > /kept' && "
           f"srun --container-name={name} cat /kept")
    try:
        proc, _ = c.on_login("salloc", "-N1", "-w", node, "sh", "-c", job)
        assert _ok(proc, "salloc with two steps in a named container").split() == ["kept"]
        proc, _ = c.on_login("srun", "-N1", "-w", node, f"--container-name={name}", image,
                             "sh", "-c", 'cat /kept; echo "$SLURM_JOB_ID"')
        kept, job_id = _ok(proc, "srun in the named container, next job").split()
        assert kept == "kept"
        # slurmstepd's messages go to slurmd's log on the node, prefixed with the step
        step = f"[{job_id}.0] pyxis:"
        log = _ok(c.on_node(node, "cat", "/var/log/slurm/slurmd.log"), f"slurmd.log on {node}")
        said = [line.split(step, 1)[1].strip() for line in log.splitlines() if step in line]
        assert "reusing existing container filesystem" in said, said
        assert not any(s.startswith("creating container filesystem") for s in said), said
    finally:  # the next run starts without it
        c.on_login("srun", "-N1", "-w", node, "enroot", "remove", "-f", f"pyxis_{name}")

"""Real etcd members on loopback, for tests of what drift reads from etcd.

``start(etcd, workdir, names)`` starts one etcd process per name as one cluster (free
ports, data and logs under *workdir*), the way roles/k8s_control_plane configures a
member (``--name`` the node's name, plain HTTP); ``Cluster.stop(name)`` ends one member,
``Cluster.close()`` all of them, by pid.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.k8sapi import free_port


@dataclass
class Cluster:
    workdir: Path
    client: dict[str, str] = field(default_factory=dict)  # name -> client URL
    peer: dict[str, str] = field(default_factory=dict)  # name -> peer URL
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def call(self, name: str, path: str, body: object) -> dict:
        """One call to the JSON gateway of member *name* (``/v3/cluster/member/add``...)."""
        req = urllib.request.Request(self.client[name] + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.terminate()
        proc.wait(timeout=30)

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url + "/health", timeout=2) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def start(etcd: Path, workdir: Path, names: list[str], timeout: float = 60) -> Cluster:
    workdir.mkdir(parents=True, exist_ok=True)
    c = Cluster(workdir)
    for name in names:
        c.client[name], c.peer[name] = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    initial = ",".join(f"{n}={c.peer[n]}" for n in names)
    for name in names:
        with open(workdir / f"{name}.log", "ab") as log:
            c.procs[name] = subprocess.Popen(
                [str(etcd), "--name", name, "--data-dir", str(workdir / f"{name}.etcd"),
                 "--listen-client-urls", c.client[name], "--advertise-client-urls", c.client[name],
                 "--listen-peer-urls", c.peer[name], "--initial-advertise-peer-urls", c.peer[name],
                 "--initial-cluster", initial, "--initial-cluster-state", "new", "--listen-metrics-urls", ""],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not all(_healthy(c.client[n]) for n in names):
            dead = [n for n, p in c.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"etcd {dead[0]} exited:\n{c.log(dead[0])}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd not healthy after {timeout}s:\n{c.log(names[0])}")
            time.sleep(0.2)
    except BaseException:
        c.close()
        raise
    return c

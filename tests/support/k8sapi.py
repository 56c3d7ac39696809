"""A private etcd + kube-apiserver on loopback, for tests of the Kubernetes outputs.

``K8sAPI.start(workdir)`` makes a CA, a serving certificate (localhost,
127.0.0.1), an admin client certificate (O=system:masters) and a service-account
key pair with openssl, starts ``etcd`` and ``kube-apiserver`` on free loopback
ports with their state and logs under *workdir*, waits for ``/readyz`` and writes
``workdir/kubeconfig``::

    with K8sAPI.start(tmp_path) as api:
        subprocess.run(["kubectl", "--kubeconfig", api.kubeconfig, "get", "ns"])

The binaries come from ``scripts/build-k8s.sh`` (``$RAILYARD_K8S_BIN``, else
``~/.cache/railyard/k8s/<K8S_VERSION>/bin``); ``find_bin_dir()`` returns None
when they are not built, so a test can skip with the reason.  Nothing listens
on anything but 127.0.0.1; the service CIDR is only an allocation range (no
kubelet, no kube-proxy), and ``--endpoint-reconciler-type=none`` because
Endpoints may not hold a loopback address.

Processes run in their own session with pid files in *workdir*, so the CLI
(``python -m tests.support.k8sapi start|stop|status DIR``) can start them in one
command and stop them in another.  ``api.spawn(name, argv)`` runs another
component (kube-controller-manager, kube-scheduler, kueue, kwok) under the same
bookkeeping; ``stop()`` ends all of them, by pid, newest first.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from railyard import builds

K8S_VERSION = os.environ.get("K8S_VERSION", f"v{builds.KUBERNETES}")
SERVICE_CIDR = "10.96.0.0/16"  # allocation only: nothing here routes or dials it


def find_bin_dir() -> Path | None:
    """The dir with etcd and kube-apiserver from scripts/build-k8s.sh, or None."""
    env = os.environ.get("RAILYARD_K8S_BIN")
    cache = os.environ.get("RAILYARD_K8S_CACHE", str(Path.home() / ".cache/railyard/k8s"))
    for d in ([Path(env)] if env else []) + [Path(cache) / K8S_VERSION / "bin"]:
        if (d / "etcd").is_file() and (d / "kube-apiserver").is_file():
            return d
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """CA, apiserver serving cert, admin client cert, service-account keys (openssl)."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / "admin.crt").exists():
        return
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "3650",
        "-subj",
        "/CN=railyard-lab-ca",
        cwd=d,
    )
    certs = {
        "apiserver": (
            "/CN=kube-apiserver",
            (
                "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
                "extendedKeyUsage=serverAuth\n"
            ),
        ),
        "admin": ("/O=system:masters/CN=railyard-admin", "extendedKeyUsage=clientAuth\n"),
        # a serving cert for webhooks that a test runs on loopback (e.g. Kueue's)
        "webhook": (
            "/CN=webhook",
            ("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ),
    }
    for name, (subj, ext) in certs.items():
        (d / f"{name}.ext").write_text(ext)
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subj,
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def _b64(p: Path) -> str:
    import base64

    return base64.b64encode(p.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    """A kubeconfig with the certs embedded (JSON is valid kubeconfig YAML)."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {"server": server, "certificate-authority-data": _b64(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": _b64(pki / "admin.crt"),
                    "client-key-data": _b64(pki / "admin.key"),
                },
            }
        ],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}}],
        "current-context": "lab",
    }
    path.write_text(json.dumps(cfg, indent=1) + "\n")
    path.chmod(0o600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie of ours counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@dataclass
class K8sAPI:
    workdir: Path
    bin_dir: Path
    server: str = ""
    etcd_url: str = ""
    startup_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    # -- processes ----------------------------------------------------------------
    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Start a component in its own session; log to workdir/<name>.log, pid file beside it."""
        with open(self.workdir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
            )
        (self.workdir / f"{name}.pid").write_text(f"{proc.pid}\n")
        order = self.workdir / "pids.order"
        with order.open("a") as f:
            f.write(name + "\n")
        return proc

    def log_tail(self, name: str, n: int = 30) -> str:
        p = self.workdir / f"{name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:]) if p.exists() else ""

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        return self.request("GET", path, timeout=timeout)

    def request(
        self, method: str, path: str, body: object = None, timeout: float = 5
    ) -> tuple[int, str]:
        """One REST call with the admin cert; *body* is sent as JSON.  No kubectl process,
        so a test can time what the server does rather than a client's start-up."""
        req = urllib.request.Request(
            self.server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"} if body is not None else {},
        )
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def _wait(self, name: str, check, timeout: float) -> float:
        t0 = time.monotonic()
        pid = int((self.workdir / f"{name}.pid").read_text())
        while time.monotonic() - t0 < timeout:
            if not _alive(pid):
                raise RuntimeError(f"{name} exited during start-up:\n{self.log_tail(name)}")
            try:
                if check():
                    return time.monotonic() - t0
            except (OSError, ssl.SSLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{name} not ready after {timeout}s:\n{self.log_tail(name)}")

    # -- start/stop -----------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workdir: Path | str,
        bin_dir: Path | None = None,
        timeout: float = 120,
        extra_apiserver_args: list[str] | None = None,
    ) -> Self:
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        bin_dir = bin_dir or find_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("etcd/kube-apiserver not built: run scripts/build-k8s.sh")
        api = cls(workdir, Path(bin_dir))
        t0 = time.monotonic()
        make_pki(api.pki)
        api.startup_seconds["pki"] = time.monotonic() - t0

        ep, pp, ap = free_port(), free_port(), free_port()
        api.etcd_url = f"http://127.0.0.1:{ep}"
        api.server = f"https://127.0.0.1:{ap}"
        api.spawn(
            "etcd",
            [
                str(api.bin_dir / "etcd"),
                "--name",
                "lab",
                "--data-dir",
                str(workdir / "etcd-data"),
                "--listen-client-urls",
                api.etcd_url,
                "--advertise-client-urls",
                api.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{pp}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{pp}",
                "--initial-cluster",
                f"lab=http://127.0.0.1:{pp}",
                "--listen-metrics-urls",
                "",
            ],
        )

        def etcd_ok() -> bool:
            with urllib.request.urlopen(api.etcd_url + "/health", timeout=2) as r:
                return b'"true"' in r.read()

        api.startup_seconds["etcd"] = api._wait("etcd", etcd_ok, timeout)

        p = api.pki
        api.spawn(
            "kube-apiserver",
            [
                str(api.bin_dir / "kube-apiserver"),
                "--etcd-servers",
                api.etcd_url,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(ap),
                "--endpoint-reconciler-type",
                "none",
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--tls-cert-file",
                str(p / "apiserver.crt"),
                "--tls-private-key-file",
                str(p / "apiserver.key"),
                "--client-ca-file",
                str(p / "ca.crt"),
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(p / "sa.pub"),
                "--service-account-signing-key-file",
                str(p / "sa.key"),
                "--authorization-mode",
                "RBAC",
                "--cert-dir",
                str(workdir / "apiserver-certs"),
                "--profiling=false",
                *(extra_apiserver_args or []),
            ],
        )
        write_kubeconfig(api.kubeconfig, api.server, api.pki)
        api.startup_seconds["kube-apiserver"] = api._wait(
            "kube-apiserver", lambda: api.get("/readyz", timeout=2)[0] == 200, timeout
        )
        api.startup_seconds["total"] = time.monotonic() - t0
        (workdir / "state.json").write_text(
            json.dumps(
                {
                    "server": api.server,
                    "etcd": api.etcd_url,
                    "kubeconfig": str(api.kubeconfig),
                    "bin_dir": str(api.bin_dir),
                    "startup_seconds": api.startup_seconds,
                },
                indent=1,
            )
            + "\n"
        )
        return api

    @staticmethod
    def stop_dir(workdir: Path | str, grace: float = 10) -> list[str]:
        """End every process started under *workdir* (by its pid file), newest first."""
        workdir = Path(workdir)
        order = workdir / "pids.order"
        names = order.read_text().split() if order.exists() else []
        stopped = []
        for name in reversed(list(dict.fromkeys(names))):
            pf = workdir / f"{name}.pid"
            if not pf.exists():
                continue
            pid = int(pf.read_text())
            if _alive(pid):
                try:
                    os.killpg(pid, signal.SIGTERM)  # own session: pgid == pid
                except ProcessLookupError:
                    pass
                t0 = time.monotonic()
                while _alive(pid) and time.monotonic() - t0 < grace:
                    time.sleep(0.1)
                if _alive(pid):
                    os.killpg(pid, signal.SIGKILL)
                stopped.append(name)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            pf.unlink()
        order.unlink(missing_ok=True)
        return stopped

    def stop(self) -> list[str]:
        return self.stop_dir(self.workdir)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"start", "stop", "status"}:
        print("usage: python -m tests.support.k8sapi start|stop|status DIR", file=sys.stderr)
        return 2
    cmd, d = argv[0], Path(argv[1])
    if cmd == "start":
        api = K8sAPI.start(d)
        print(f"server={api.server}\nkubeconfig={api.kubeconfig}")
        print(
            "startup_seconds="
            + json.dumps({k: round(v, 2) for k, v in api.startup_seconds.items()})
        )
        return 0
    if cmd == "stop":
        print("stopped: " + " ".join(K8sAPI.stop_dir(d)))
        return 0
    order = d / "pids.order"
    for name in dict.fromkeys(order.read_text().split() if order.exists() else []):
        pf = d / f"{name}.pid"
        pid = int(pf.read_text()) if pf.exists() else 0
        print(f"{name}: {'running' if pid and _alive(pid) else 'not running'} (pid {pid})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

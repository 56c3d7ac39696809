"""Real etcd members on loopback, for tests of what drift reads from etcd.

``start(etcd, workdir, names)`` starts one etcd process per name as one cluster (free
ports, data, logs and certificates under *workdir*), the way roles/k8s_control_plane
configures a member: ``--name`` the node's name, TLS for clients and peers with
client-cert-auth, certificates from an etcd CA of its own (not the cluster CA), as
kubeadm lays them out. ``Cluster.stop(name)`` ends one member, ``Cluster.close()`` all
of them, by pid.

The certificates (:func:`make_pki`) are made with ``cryptography``: an etcd CA, per
member a server certificate and a peer certificate for IP:127.0.0.1, and the health
check client certificate (CN kube-etcd-healthcheck-client) drift's probe presents. They
carry key identifiers (RFC 5280) as kubeadm's do: the probe verifies strictly, as
python3.13 does by default, and refuses a chain without them.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.k8sapi import free_port

HEALTHCHECK_CN = "kube-etcd-healthcheck-client"  # kubeadm's name for it


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Ca(KeyPair):
    name: str = ""

    def sign(self, path: Path, cn: str, *, server: bool = False, client: bool = False) -> KeyPair:
        """A leaf for IP:127.0.0.1 (the only address the members use) with the usages asked for."""
        ca_cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.key.read_bytes(), None)
        usages = [u for u, want in ((ExtendedKeyUsageOID.SERVER_AUTH, server),
                                    (ExtendedKeyUsageOID.CLIENT_AUTH, client)) if want]
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (_builder(cn, key, ca_cert.subject)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return _write(path, builder.sign(ca_key, hashes.SHA256()), key)


def _builder(cn: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    path.parent.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(path.with_suffix(".crt"), path.with_suffix(".key"))
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pair.key.chmod(0o600)
    return pair


def make_ca(path: Path, cn: str = "etcd-ca") -> Ca:
    """A self-signed CA at ``path``.crt/.key (kubeadm's etcd CA is CN etcd-ca)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (_builder(cn, key, name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, True, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    pair = _write(path, cert, key)
    return Ca(pair.cert, pair.key, cn)


@dataclass(frozen=True)
class Pki:
    """The files under ``<workdir>/pki``, named as kubeadm names them under /etc/kubernetes/pki/etcd."""

    ca: Ca
    healthcheck: KeyPair  # the probe's client certificate
    server: dict[str, KeyPair]  # member name -> its client-side (server) certificate
    peer: dict[str, KeyPair]  # member name -> its peer certificate


def make_pki(workdir: Path, names: list[str]) -> Pki:
    """etcd's server certificate is also a client one: the JSON gateway (3.4) dials the
    member's own gRPC port with it, and client-cert-auth asks it for one (kubeadm's has both)."""
    pki = workdir / "pki"
    ca = make_ca(pki / "ca")
    return Pki(ca, ca.sign(pki / "healthcheck-client", HEALTHCHECK_CN, client=True),
               {n: ca.sign(pki / f"{n}-server", n, server=True, client=True) for n in names},
               {n: ca.sign(pki / f"{n}-peer", n, server=True, client=True) for n in names})


# --------------------------------------------------------------------------- members


@dataclass
class Cluster:
    workdir: Path
    pki: Pki
    client: dict[str, str] = field(default_factory=dict)  # name -> client URL
    peer: dict[str, str] = field(default_factory=dict)  # name -> peer URL
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def probe_tls(self) -> tuple[str, str, str]:
        """The CA, client certificate and key drift's probe takes after the endpoint."""
        return str(self.pki.ca.cert), str(self.pki.healthcheck.cert), str(self.pki.healthcheck.key)

    def call(self, name: str, path: str, body: object) -> dict:
        """One call to the JSON gateway of member *name* (``/v3/cluster/member/add``...)."""
        req = urllib.request.Request(self.client[name] + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with _opener(self.pki).open(req, timeout=10) as r:
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


def _opener(pki: Pki) -> urllib.request.OpenerDirector:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    ctx.load_cert_chain(str(pki.healthcheck.cert), str(pki.healthcheck.key))
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))


def _healthy(pki: Pki, url: str) -> bool:
    try:
        with _opener(pki).open(url + "/health", timeout=2) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def start(etcd: Path, workdir: Path, names: list[str], timeout: float = 60) -> Cluster:
    workdir.mkdir(parents=True, exist_ok=True)
    pki = make_pki(workdir, names)
    c = Cluster(workdir, pki)
    for name in names:
        c.client[name], c.peer[name] = f"https://127.0.0.1:{free_port()}", f"https://127.0.0.1:{free_port()}"
    initial = ",".join(f"{n}={c.peer[n]}" for n in names)
    ca = str(pki.ca.cert)
    for name in names:
        server, peer = pki.server[name], pki.peer[name]
        with open(workdir / f"{name}.log", "ab") as log:
            c.procs[name] = subprocess.Popen(
                [str(etcd), "--name", name, "--data-dir", str(workdir / f"{name}.etcd"),
                 "--listen-client-urls", c.client[name], "--advertise-client-urls", c.client[name],
                 "--listen-peer-urls", c.peer[name], "--initial-advertise-peer-urls", c.peer[name],
                 "--initial-cluster", initial, "--initial-cluster-state", "new", "--listen-metrics-urls", "",
                 "--cert-file", str(server.cert), "--key-file", str(server.key),
                 "--client-cert-auth", "--trusted-ca-file", ca,
                 "--peer-cert-file", str(peer.cert), "--peer-key-file", str(peer.key),
                 "--peer-client-cert-auth", "--peer-trusted-ca-file", ca],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not all(_healthy(pki, c.client[n]) for n in names):
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

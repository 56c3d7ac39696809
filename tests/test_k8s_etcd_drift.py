"""Drift's etcd observation against real etcd members: the probe as it runs on a
control-plane node (python3 -c, the JSON gateway), parsed and compared with the plan.

The etcd is the one scripts/build-k8s.sh leaves for the control plane (Debian's
etcd-server, extracted); members run on loopback (tests/support/etcdproc.py), named and
secured as roles/k8s_control_plane sets them up: TLS for clients and peers, client-cert-auth,
an etcd CA of their own; the probe presents the health check client certificate.
dgx-h100 names three control-plane nodes, kcp[1-3]: the shape of the HA control plane
issue 22 asks for.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest

from railyard.drift import compare
from railyard.drift.kubernetes import etcd_from_probe, etcd_probe_argv, observation
from railyard.drift.observed import Observed
from railyard.load import load_plan
from tests.conftest import ROOT
from tests.support import etcdproc, k8sapi

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def etcd_bin() -> Path:
    cache = Path(os.environ.get("RAILYARD_K8S_CACHE", str(Path.home() / ".cache/railyard/k8s")))
    etcd = Path(os.environ.get("RAILYARD_K8S_BIN", str(cache / k8sapi.K8S_VERSION / "bin"))) / "etcd"
    if not etcd.is_file():
        pytest.fail(f"{etcd} is not built: run scripts/build-k8s.sh etcd (scripts/bootstrap.sh does)")
    return etcd


def probe(host: str, url: str, c: etcdproc.Cluster, *, ca: Path | None = None,
          client: etcdproc.KeyPair | None = None):
    """The probe as collect runs it, with *c*'s CA and health check client certificate
    unless another *ca* or *client* is given."""
    default_ca, cert, key = c.probe_tls()
    if client is not None:
        cert, key = str(client.cert), str(client.key)
    res = subprocess.run(etcd_probe_argv(url, str(ca or default_ca), cert, key), capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return etcd_from_probe(host, res.stdout)


def etcd_findings(plan, etcd) -> list[tuple[str, str]]:
    report = compare(plan, Observed(kubernetes=observation({"items": []}, [], etcd)))
    return [(f.subject, f.kind) for f in report.findings if f.kind.startswith("etcd")]


def add_learner(c: etcdproc.Cluster, peer: str) -> None:
    """etcd refuses a membership change (503, "unhealthy cluster") until every member has
    been connected for 5 s (its strict reconfiguration check): ask until it accepts."""
    deadline = time.monotonic() + 30
    while True:
        try:
            c.call("kcp1", "/v3/cluster/member/add", {"peerURLs": [peer], "isLearner": True})
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_three_members_then_an_unstarted_learner_then_one_stopped(etcd_bin, tmp_path):
    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    assert plan.kubernetes.control_plane == ("kcp1", "kcp2", "kcp3")
    c = etcdproc.start(etcd_bin, tmp_path, ["kcp1", "kcp2", "kcp3"])
    try:
        got = probe("kcp1", c.client["kcp1"], c)
        assert got.failure == "" and got.unreadable == ""
        assert all(url.startswith("https://") for url in c.client.values())
        assert sorted((m.name, m.client_urls, m.healthy) for m in got.members) == [
            (n, (c.client[n],), True) for n in ("kcp1", "kcp2", "kcp3")]
        assert etcd_findings(plan, got) == []

        add_learner(c, "https://127.0.0.1:2390")
        got = probe("kcp2", c.client["kcp2"], c)
        [new] = [m for m in got.members if not m.name]
        assert (new.learner, new.peer_urls, new.client_urls) == (True, ("https://127.0.0.1:2390",), ())
        unstarted = (f"etcd/{int(new.id):x}", "etcd_member_unstarted")
        assert etcd_findings(plan, got) == [unstarted]

        c.stop("kcp3")  # two of three voters keep the quorum: only kcp3 is unhealthy
        got = probe("kcp1", c.client["kcp1"], c)
        assert etcd_findings(plan, got) == [unstarted, ("kcp3", "etcd_member_unhealthy")]
        [kcp3] = [m for m in got.members if m.name == "kcp3"]
        assert "Connection refused" in kcp3.health
    finally:
        c.close()
    stopped = probe("kcp1", c.client["kcp1"], c)
    assert stopped.failure.endswith("Connection refused") and not stopped.tls


def test_a_healthy_cluster_then_one_member_stopped(etcd_bin, tmp_path):
    """The HA control plane as the role leaves it: no etcd findings; kcp2 stopped is kcp2
    unhealthy, named, and nothing else (kcp1 and kcp3 keep the quorum)."""
    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    c = etcdproc.start(etcd_bin, tmp_path, ["kcp1", "kcp2", "kcp3"])
    try:
        assert etcd_findings(plan, probe("kcp1", c.client["kcp1"], c)) == []
        c.stop("kcp2")
        got = probe("kcp3", c.client["kcp3"], c)
        assert etcd_findings(plan, got) == [("kcp2", "etcd_member_unhealthy")]
        [finding] = [f for f in compare(plan, Observed(kubernetes=observation({"items": []}, [], got))).findings
                     if f.kind.startswith("etcd")]
        assert finding.message.startswith("kcp2: etcd member kcp2 is not healthy (its /health does not answer (")
        assert "Connection refused" in finding.message
    finally:
        c.close()


def test_a_probe_etcd_refuses_is_a_readable_failure(etcd_bin, tmp_path):
    """etcd asks for a client certificate signed by its CA and proves itself with one;
    the probe on the wrong side of either, or without its files, is etcd_down with the
    reason (what the role has not written, or which side refused the handshake), never a
    crash or unreadable output."""
    plan = load_plan(ROOT / "inventories/dgx-h100/cluster.yaml")
    c = etcdproc.start(etcd_bin, tmp_path, ["kcp1", "kcp2", "kcp3"])
    other = etcdproc.make_ca(tmp_path / "other" / "ca", "another-ca")
    stranger = other.sign(tmp_path / "other" / "client", etcdproc.HEALTHCHECK_CN, client=True)
    url = c.client["kcp1"]
    try:
        wrong_ca = probe("kcp1", url, c, ca=other.cert)
        not_trusted = probe("kcp1", url, c, client=stranger)
        no_cert = probe("kcp1", url, c, client=etcdproc.KeyPair(tmp_path / "absent.crt", tmp_path / "absent.key"))
    finally:
        c.close()
    assert wrong_ca.failure.startswith(f"TLS: the server's certificate does not verify against the etcd CA "
                                       f"{other.cert} (")
    # TLS 1.3: etcd's refusal reaches the probe as its alert, or as the connection closed
    # when etcd closes first (under load); both name the client certificate
    assert not_trusted.failure.startswith((f"TLS: etcd refused the client certificate {stranger.cert} (",
                                           "TLS: etcd closed the connection without an answer (")), not_trusted.failure
    assert f"client certificate {stranger.cert}" in not_trusted.failure
    assert no_cert.failure == f"cannot read the client certificate {tmp_path}/absent.crt (missing)"
    for got in (wrong_ca, not_trusted, no_cert):
        assert (got.unreadable, got.members, got.tls) == ("", (), True)
        report = compare(plan, Observed(kubernetes=observation({"items": []}, [], got)))
        [down] = [f for f in report.findings if f.kind.startswith("etcd")]
        assert (down.subject, down.kind) == ("kcp1", "etcd_down")
        assert down.message == f"kcp1: etcd does not answer on {url} ({got.failure})"
        assert "roles/k8s_control_plane writes" in down.fix


def test_the_lab_plan_against_a_member_of_another_name(etcd_bin, tmp_path, lab_plan):
    """The lab plan's one control-plane node is kcp1: a member named otherwise is kcp1
    missing and an unexpected member."""
    c = etcdproc.start(etcd_bin, tmp_path, ["kcp1"])
    try:
        assert etcd_findings(lab_plan, probe("kcp1", c.client["kcp1"], c)) == []
    finally:
        c.close()
    other = etcdproc.start(etcd_bin, tmp_path / "other", ["kcp9"])
    try:
        assert etcd_findings(lab_plan, probe("kcp1", other.client["kcp9"], other)) == [
            ("etcd/kcp9", "etcd_member_unexpected"), ("kcp1", "etcd_member_missing")]
    finally:
        other.close()

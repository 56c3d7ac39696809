"""Drift's etcd observation against real etcd members: the probe as it runs on a
control-plane node (python3 -c, the JSON gateway), parsed and compared with the plan.

The etcd is the one scripts/build-k8s.sh leaves for the control plane (Debian's
etcd-server, extracted); members run on loopback (tests/support/etcdproc.py), named as
roles/k8s_control_plane names them. dgx-h100 names three control-plane nodes, kcp[1-3]:
the shape of the HA control plane issue 22 asks for.
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


def probe(host: str, url: str):
    res = subprocess.run(etcd_probe_argv(url), capture_output=True, text=True, timeout=60, check=False)
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
        got = probe("kcp1", c.client["kcp1"])
        assert got.failure == "" and got.unreadable == ""
        assert sorted((m.name, m.client_urls, m.healthy) for m in got.members) == [
            (n, (c.client[n],), True) for n in ("kcp1", "kcp2", "kcp3")]
        assert etcd_findings(plan, got) == []

        add_learner(c, "http://127.0.0.1:2390")
        got = probe("kcp2", c.client["kcp2"])
        [new] = [m for m in got.members if not m.name]
        assert (new.learner, new.peer_urls, new.client_urls) == (True, ("http://127.0.0.1:2390",), ())
        unstarted = (f"etcd/{int(new.id):x}", "etcd_member_unstarted")
        assert etcd_findings(plan, got) == [unstarted]

        c.stop("kcp3")  # two of three voters keep the quorum: only kcp3 is unhealthy
        got = probe("kcp1", c.client["kcp1"])
        assert etcd_findings(plan, got) == [unstarted, ("kcp3", "etcd_member_unhealthy")]
        [kcp3] = [m for m in got.members if m.name == "kcp3"]
        assert "Connection refused" in kcp3.health
    finally:
        c.close()
    assert probe("kcp1", c.client["kcp1"]).failure.endswith("Connection refused")


def test_the_lab_plan_against_a_member_of_another_name(etcd_bin, tmp_path, lab_plan):
    """The lab plan's one control-plane node is kcp1: a member named otherwise is kcp1
    missing and an unexpected member."""
    c = etcdproc.start(etcd_bin, tmp_path, ["kcp1"])
    try:
        assert etcd_findings(lab_plan, probe("kcp1", c.client["kcp1"])) == []
    finally:
        c.close()
    other = etcdproc.start(etcd_bin, tmp_path / "other", ["kcp9"])
    try:
        assert etcd_findings(lab_plan, probe("kcp1", other.client["kcp9"])) == [
            ("etcd/kcp9", "etcd_member_unexpected"), ("kcp1", "etcd_member_missing")]
    finally:
        other.close()

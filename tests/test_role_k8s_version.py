"""The Kubernetes roles compare what they installed with the spec's cluster.versions.

The comparison's inputs: `railyard render` writes railyard_kubernetes_version,
railyard_kueue_version and railyard_volcano_version for every host, each role's default
picks them up, and each role reads the installed release from what the binary says:
kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet from `--version`
(major.minor), Kueue and Volcano from the module version in their Go build info (x.y.z; the
binaries scripts/build-k8s.sh makes have no version stamp of their own). The asserts ran
against the lab's binaries in molecule/kubernetes (its verifier runs each check against a
wrong expected version).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from railyard import builds
from railyard.apply.playbooks import LAB_K8S_RELEASE, ROLE_VARS
from railyard.load import load_plan
from railyard.render import render
from railyard.spec import Versions

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "inventories/lab/cluster.yaml"


def _var(role: str, name: str, **variables) -> object:
    expr = yaml.safe_load((ROOT / f"roles/{role}/vars/main.yml").read_text())[name]
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


def _defaults(role: str) -> dict:
    return yaml.safe_load((ROOT / f"roles/{role}/defaults/main.yml").read_text())


@pytest.mark.parametrize(
    ("stdout", "release"),
    [
        ("Kubernetes v1.35.4", "1.35"),
        ("Kubernetes v1.34.0-rc.1", "1.34"),
        ("Kubernetes v1.100.2", "1.100"),
        ("", ""),  # the binary is not there (check mode before the first install)
        ("Kubernetes v0.0.0-master+$Format:%H$", "0.0"),  # built without the version -ldflags: a mismatch
        ("error: unknown flag: --version", ""),
    ],
)
def test_kubernetes_release_is_major_minor(stdout, release):
    assert _var("k8s_worker", "_k8s_worker_installed_release", __k8s_worker_version={"stdout": stdout}) == release
    results = [{"item": d, "stdout": stdout, "rc": 0} for d in ("kube-apiserver", "kube-controller-manager")]
    got = _var("k8s_control_plane", "_k8s_control_plane_installed_releases",
               __k8s_control_plane_versions={"results": [*results, {"skipped": True}]})
    assert got == [release, release]


def test_control_plane_daemons_each_count():
    """One daemon of another minor is enough to fail: the releases differ."""
    results = [{"item": "kube-apiserver", "stdout": "Kubernetes v1.35.4", "rc": 0},
               {"item": "kube-scheduler", "stdout": "Kubernetes v1.34.2", "rc": 0}]
    got = _var("k8s_control_plane", "_k8s_control_plane_installed_releases",
               __k8s_control_plane_versions={"results": results})
    assert got == ["1.35", "1.34"]
    absent = _var("k8s_control_plane", "_k8s_control_plane_versioned_absent",
                  __k8s_control_plane_versions={"results": [*results, {"item": "x", "stdout": "", "rc": 2}]})
    assert absent is True


@pytest.mark.parametrize(
    ("role", "var", "module", "stdout", "release"),
    [
        ("kueue", "_kueue_installed_release", "sigs.k8s.io/kueue", "mod\tsigs.k8s.io/kueue\tv0.17.1", "0.17.1"),
        ("kueue", "_kueue_installed_release", "sigs.k8s.io/kueue", "mod\tsigs.k8s.io/kueue\tv0.18.0-rc.1", "0.18.0-rc.1"),
        ("kueue", "_kueue_installed_release", "sigs.k8s.io/kueue", "", ""),
        ("kueue", "_kueue_installed_release", "sigs.k8s.io/kueue", "mod\tsigs.k8s.io/kueue\t(devel)", ""),
        ("volcano", "_volcano_installed_releases", "volcano.sh/volcano", "mod\tvolcano.sh/volcano\tv1.14.1", "1.14.1"),
        ("volcano", "_volcano_installed_releases", "volcano.sh/volcano", "", ""),
    ],
)
def test_go_build_info_release(role, var, module, stdout, release):
    if role == "kueue":
        assert _var(role, var, __kueue_version={"stdout": stdout}) == release
    else:
        got = _var(role, var, __volcano_versions={"results": [{"stdout": stdout}, {"stdout": stdout}]})
        assert got == [release, release]


def test_the_grep_pattern_is_the_line_go_version_m_prints():
    """The roles' grep -E pattern finds the build info's `mod` line (tab separated) and
    nothing of the `dep` lines: Kueue's binary also records volcano.sh/apis as a dep."""
    buildinfo = ("path\tsigs.k8s.io/kueue/cmd/kueue\nmod\tsigs.k8s.io/kueue\tv0.17.1\th1:7hzb=\n"
                 "dep\tvolcano.sh/apis\tv1.14.0\th1:Rf8w=\n")
    for role, want in (("kueue", "mod\tsigs.k8s.io/kueue\tv0.17.1"), ("volcano", None)):
        tasks = yaml.safe_load((ROOT / f"roles/{role}/tasks/install.yml").read_text())
        argv = next(t for t in tasks if t["name"].startswith("Read the installed"))["ansible.builtin.command"]["argv"]
        pattern = argv[5]
        found = [m.group(0) for line in buildinfo.splitlines() if (m := re.search(pattern, line))]
        assert found == ([want] if want else []), (role, found)


@pytest.mark.parametrize(("role", "var", "default"), [
    ("k8s_control_plane", "k8s_control_plane_kubernetes_version", "{{ railyard_kubernetes_version | default('') }}"),
    ("k8s_worker", "k8s_worker_kubernetes_version", "{{ railyard_kubernetes_version | default('') }}"),
    ("kueue", "kueue_version", "{{ railyard_kueue_version | default('0.17.1') }}"),
    ("volcano", "volcano_version", "{{ railyard_volcano_version | default('1.14.1') }}"),
])
def test_the_default_is_the_spec_version(role, var, default):
    assert _defaults(role)[var] == default


def test_render_gives_every_host_the_spec_versions():
    want = yaml.safe_load(LAB.read_text())["cluster"]["versions"]  # the spec's, as written
    art = render(load_plan(LAB))
    for name in ("kubernetes", "kueue", "volcano"):
        assert json.loads(art["ansible/group_vars/all.json"])[f"railyard_{name}_version"] == want[name]
        assert json.loads(art["ansible/inventory.json"])["all"]["vars"][f"railyard_{name}_version"] == want[name]


def test_role_vars_name_the_spec_versions():
    """What `railyard up` and drift pass: the spec's Kueue and Volcano releases; the lab's
    Kubernetes binaries are LAB_K8S_RELEASE, whose minor the lab spec names."""
    plan = load_plan(LAB)
    versions = plan.spec.cluster.versions
    assert ROLE_VARS["kueue"](plan)["kueue_version"] == versions.kueue
    assert ROLE_VARS["volcano"](plan)["volcano_version"] == versions.volcano
    assert ROLE_VARS["k8s_control_plane"](plan)["k8s_control_plane_version"] == LAB_K8S_RELEASE
    assert ROLE_VARS["k8s_worker"](plan)["k8s_worker_kubelet_version"] == LAB_K8S_RELEASE
    assert LAB_K8S_RELEASE.rsplit(".", 1)[0] == versions.kubernetes


def test_lab_spec_roles_and_spec_defaults_are_what_build_k8s_builds():
    """The lab spec, the spec's defaults, the roles' defaults and LAB_K8S_RELEASE name what
    scripts/build-k8s.sh builds by default (railyard/builds.py), so the lab passes the roles'
    version checks (the compiler cannot see the controller's binaries; the roles read them)."""
    k8s, kueue, volcano = "1.35.4", "0.17.1", "1.14.1"
    assert (builds.KUBERNETES, builds.KUEUE, builds.VOLCANO) == (k8s, kueue, volcano)
    assert LAB_K8S_RELEASE == k8s
    assert _defaults("k8s_control_plane")["k8s_control_plane_version"] == k8s
    assert _defaults("k8s_worker")["k8s_worker_kubelet_version"] == k8s
    assert _defaults("k8s_worker")["k8s_worker_kwok_version"] == builds.KWOK
    lab = yaml.safe_load(LAB.read_text())["cluster"]["versions"]
    for versions in (lab, Versions().model_dump()):
        assert (versions["kubernetes"], versions["kueue"], versions["volcano"]) == (k8s.rsplit(".", 1)[0], kueue, volcano)
    for inv in sorted((ROOT / "inventories").glob("*/cluster.yaml")):
        assert yaml.safe_load(inv.read_text())["cluster"]["versions"]["kubernetes"] == k8s.rsplit(".", 1)[0], inv


def test_the_build_script_builds_the_releases_railyard_installs(tmp_path):
    """scripts/build-k8s.sh takes its default releases from railyard/builds.py, the list
    validate checks specs against: its cache directory is named by that Kubernetes build."""
    proc = subprocess.run(["bash", str(ROOT / "scripts/build-k8s.sh"), "--print-bin"], capture_output=True, text=True,
                          env={**os.environ, "RAILYARD_K8S_CACHE": str(tmp_path), "K8S_VERSION": ""}, check=True)
    assert proc.stdout.strip() == f"{tmp_path}/v1.35.4/bin"
    bad = subprocess.run(["bash", str(ROOT / "scripts/build-k8s.sh"), "--print-bin"], capture_output=True, text=True,
                         env={**os.environ, "RAILYARD_K8S_CACHE": str(tmp_path), "KUEUE_VERSION": "0.17"}, check=False)
    assert bad.returncode == 1 and 'KUEUE_VERSION is "0.17", not vX.Y.Z' in bad.stderr

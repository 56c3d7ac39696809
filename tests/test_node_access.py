"""pam_slurm_adopt in the spec: what validate refuses, what the inventory and the lab's
machines get. The PAM stack itself runs in molecule (roles/slurm_compute, slurm_cluster) and
in the lab (tests/support/node_access.py). Expected values are literals or the spec's."""

from __future__ import annotations

import pytest

from railyard.apply.machines import node_spec
from railyard.compiler.inventory import cluster_vars
from tests.support import specs


def _plan(spec: dict):
    return specs.plan(spec, "adopt.yaml")


_refused = specs.refused_at


def test_adoption_without_cgroups_is_refused_with_the_fix(lab):
    lab["partitions"]["slurm"]["cgroups"] = False
    msg = _refused(lab, "partitions.slurm.pam_slurm_adopt")
    assert "cgroups: false" in msg and "set partitions.slurm.cgroups: true, or remove pam_slurm_adopt" in msg


@pytest.mark.parametrize("group", ["wheel; rm -rf /", "Admins", "(hpcadmin)", "a" * 33, ""])
def test_an_admin_group_that_is_not_a_plain_group_name_is_refused(lab, group):
    lab["partitions"]["slurm"]["pam_slurm_adopt"]["admin_group"] = group
    assert "is not a group name" in _refused(lab, "partitions.slurm.pam_slurm_adopt.admin_group")


def test_the_admin_group_is_required(lab):
    lab["partitions"]["slurm"]["pam_slurm_adopt"] = {}
    assert "missing" in _refused(lab, "partitions.slurm.pam_slurm_adopt.admin_group")


def test_every_host_learns_whether_ssh_needs_a_job_and_who_gets_in_anyway(lab):
    cluster = cluster_vars(_plan(lab))
    assert (cluster["railyard_slurm_pam_slurm_adopt"], cluster["railyard_slurm_admin_group"]) == (True, "hpcadmin")
    del lab["partitions"]["slurm"]["pam_slurm_adopt"]
    cluster = cluster_vars(_plan(lab))
    assert cluster["railyard_slurm_pam_slurm_adopt"] is False and "railyard_slurm_admin_group" not in cluster


def test_lab_compute_nodes_with_cgroups_are_privileged_and_get_no_dev_null_gpus(lab):
    """slurmd writes the cgroup v1 hierarchies: a privileged container. ConstrainDevices would
    hide /dev/null itself from GPU-less jobs were the stand-ins /dev/null binds."""
    plan = _plan(lab)
    gpu, kw, login = (node_spec(plan, plan.node(n)) for n in ("gpu001", "kw1", "login1"))
    assert (gpu.privileged, gpu.devices) == (True, ())
    assert (kw.privileged, kw.devices) == (True, ("/dev/nvidia0", "/dev/nvidia1"))  # the kubelet's, unchanged
    assert login.privileged is False
    lab["partitions"]["slurm"]["cgroups"] = False
    del lab["partitions"]["slurm"]["pam_slurm_adopt"]
    plan = _plan(lab)
    gpu = node_spec(plan, plan.node("gpu001"))
    assert (gpu.privileged, gpu.devices) == (False, ("/dev/nvidia0", "/dev/nvidia1"))

"""How nodes get slurm.conf: partitions.slurm.config_delivery, configless or files.

Configless is the default from Slurm 24.11; an explicit configless before 23.11 is refused
(login nodes then need sackd, new in 23.11). The choice reaches slurm.conf
(SlurmctldParameters=enable_configless) and the Slurm roles (railyard_slurm_config_delivery).
"""

from __future__ import annotations

import json

import pytest
import yaml

from railyard.errors import SpecError
from railyard.load import loads_plan
from railyard.render import render

CONFIGLESS = "SlurmctldParameters=enable_configless\n"


def _render(lab: dict, version: str, delivery: str | None = None) -> dict[str, str]:
    lab["cluster"]["versions"]["slurm"] = version
    if delivery is not None:
        lab["partitions"]["slurm"]["config_delivery"] = delivery
    return render(loads_plan(yaml.safe_dump(lab), "t.yaml"))


@pytest.mark.parametrize(
    ("version", "default"),
    [("22.05", "files"), ("23.11", "files"), ("24.05", "files"), ("24.11", "configless"), ("25.05", "configless"),
     ("26.05", "configless")],
)
def test_default_follows_the_target_release(lab, version, default):
    art = _render(lab, version)
    assert (CONFIGLESS in art["slurm/slurm.conf"]) == (default == "configless")
    assert json.loads(art["ansible/group_vars/all.json"])["railyard_slurm_config_delivery"] == default
    assert json.loads(art["ansible/inventory.json"])["all"]["vars"]["railyard_slurm_config_delivery"] == default


@pytest.mark.parametrize(("version", "delivery"), [("23.11", "configless"), ("24.11", "files"), ("22.05", "files")])
def test_an_explicit_choice_wins(lab, version, delivery):
    art = _render(lab, version, delivery)
    assert (CONFIGLESS in art["slurm/slurm.conf"]) == (delivery == "configless")
    assert json.loads(art["ansible/group_vars/all.json"])["railyard_slurm_config_delivery"] == delivery


def test_configless_line_sits_with_the_controller_settings(lab):
    conf = _render(lab, "24.11")["slurm/slurm.conf"]
    assert "SlurmctldPort=6817\nSlurmctldParameters=enable_configless\nSlurmdPort=6818\n" in conf
    assert conf.count("SlurmctldParameters=") == 1


def test_configless_before_sackd_is_refused(lab):
    lab["cluster"]["versions"]["slurm"] = "22.05"
    lab["partitions"]["slurm"]["config_delivery"] = "configless"
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(lab, sort_keys=False), "bad.yaml")
    (problem,) = [p for p in info.value.problems if p.path == "partitions.slurm.config_delivery"]
    assert problem.message == (
        "configless Slurm needs sackd on the login nodes, new in Slurm 23.11, but the target is 22.05: set "
        "config_delivery: files, or raise cluster.versions.slurm to 23.11 or later")
    assert problem.line


def test_an_unknown_delivery_is_refused(lab):
    lab["partitions"]["slurm"]["config_delivery"] = "nfs"
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(lab, sort_keys=False), "bad.yaml")
    (problem,) = [p for p in info.value.problems if p.path == "partitions.slurm.config_delivery"]
    assert "'nfs' is not allowed; use one of 'configless' or 'files'" in problem.message


def test_no_slurm_partition_no_delivery_variable(lab):
    del lab["partitions"]["slurm"]
    lab["storage"]["lustre"]["clients"] = "kw[1-2]"
    for group in ("ctl", "login", "gpu"):
        lab["nodes"] = [g for g in lab["nodes"] if g["group"] != group]
    lab["fabric"]["rail_optimized"]["scalable_units"] = [{"name": "su1", "nodes": "kw1"}, {"name": "su2", "nodes": "kw2"}]
    art = render(loads_plan(yaml.safe_dump(lab), "t.yaml"))
    assert "railyard_slurm_config_delivery" not in json.loads(art["ansible/group_vars/all.json"])

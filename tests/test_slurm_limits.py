"""Checkpoint-aware limits (issue 19, item 6): GraceTime per partition, OverTimeLimit for the
cluster. Rendered only when the spec sets them; bad values name the path and the fix."""

from __future__ import annotations

import pytest
import yaml

from railyard.errors import SpecError
from railyard.load import loads_plan
from railyard.render import render


def _conf(spec: dict) -> str:
    return render(loads_plan(yaml.safe_dump(spec), "t.yaml"))["slurm/slurm.conf"]


def _partition_line(conf: str) -> str:
    return next(line for line in conf.splitlines() if line.startswith("PartitionName=gpu "))


def test_unset_limits_are_not_rendered(lab):
    lab["partitions"]["slurm"].pop("over_time_limit", None)
    lab["partitions"]["slurm"]["partitions"][0].pop("grace_time", None)
    conf = _conf(lab)
    assert "GraceTime" not in conf and "OverTimeLimit" not in conf


def test_grace_time_and_over_time_limit_are_rendered(lab):
    lab["partitions"]["slurm"]["over_time_limit"] = 5
    lab["partitions"]["slurm"]["partitions"][0]["grace_time"] = 120
    conf = _conf(lab)
    assert "\nOverTimeLimit=5\n" in conf
    assert _partition_line(conf) == (
        "PartitionName=gpu Nodes=gpu[001-004] Default=YES MaxTime=1-00:00:00 DefCpuPerGPU=1 GraceTime=120 State=UP")


def test_zero_is_rendered_when_given(lab):
    """0 is a value (Slurm's default, written out), not 'unset'."""
    lab["partitions"]["slurm"]["over_time_limit"] = 0
    lab["partitions"]["slurm"]["partitions"][0]["grace_time"] = 0
    conf = _conf(lab)
    assert "\nOverTimeLimit=0\n" in conf and " GraceTime=0 " in _partition_line(conf)


@pytest.mark.parametrize("given", ["UNLIMITED", "unlimited", "INFINITE"])
def test_over_time_limit_unlimited(lab, given):
    lab["partitions"]["slurm"]["over_time_limit"] = given
    plan = loads_plan(yaml.safe_dump(lab), "t.yaml")
    assert "\nOverTimeLimit=UNLIMITED\n" in render(plan)["slurm/slurm.conf"]
    assert any(n.path == "partitions.slurm.over_time_limit" and "never cancels" in n.message for n in plan.notes)


def test_grace_time_without_preemption_is_a_note(lab):
    lab["partitions"]["slurm"]["partitions"][0]["grace_time"] = 30
    plan = loads_plan(yaml.safe_dump(lab), "t.yaml")
    (note,) = [n for n in plan.notes if n.path == "partitions.slurm.partitions[0].grace_time"]
    assert "PreemptType=preempt/partition_prio" in note.message and note.line


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("grace_time", -1, "-1 seconds is out of range; Slurm takes 0 to 4294967294"),
        ("grace_time", "30s", "'30s' is not a whole number of seconds"),
        ("grace_time", "30", "'30' is not a whole number of seconds"),
        ("grace_time", True, "true/false is not a whole number of seconds"),
        ("grace_time", 1.5, "1.5 is not a whole number of seconds"),
        ("grace_time", 2**32, "4294967296 seconds is out of range"),
        ("over_time_limit", -5, "-5 minutes is out of range; Slurm takes 0 to 65533 or UNLIMITED"),
        ("over_time_limit", 65534, "65534 minutes is out of range"),
        ("over_time_limit", "forever",
         "'forever' is not a whole number of minutes; write a number from 0 to 65533 or UNLIMITED"),
        ("over_time_limit", [1], "[1] is not a whole number of minutes"),
        ("over_time_limit", False, "true/false is not a whole number of minutes"),
    ],
)
def test_bad_limits_name_the_path_and_the_fix(lab, field, value, fragment):
    slurm = lab["partitions"]["slurm"]
    target, path = ((slurm["partitions"][0], f"partitions.slurm.partitions[0].{field}") if field == "grace_time"
                    else (slurm, f"partitions.slurm.{field}"))
    target[field] = value
    with pytest.raises(SpecError) as info:
        loads_plan(yaml.safe_dump(lab, sort_keys=False), "bad.yaml")
    found = [p for p in info.value.problems if p.path == path]
    assert found and fragment in found[0].message, str(info.value)
    assert found[0].line

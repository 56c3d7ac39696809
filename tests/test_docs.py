"""The README's example spec is valid and derives what the README says it derives."""

from __future__ import annotations

import re

from railyard.hostlist import expand
from railyard.load import loads_plan
from railyard.render import render
from tests.conftest import ROOT


def readme_spec() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The spec, by example", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1)


def test_readme_example_is_valid_and_derives_what_it_claims():
    plan = loads_plan(readme_spec(), "README.md")
    topo = render(plan)["slurm/topology.conf"]
    for line in ("SwitchName=su1 Nodes=gpu[01-02]", "SwitchName=su2 Nodes=gpu[04-05]", "SwitchName=spine Switches=su[1-2]"):
        assert line in topo
    assert plan.kubernetes.labels["gpu03"]["topology.railyard.dev/su"] == "su1"
    su1 = next(o for o in plan.kubernetes.volcano if o["kind"] == "HyperNode" and o["metadata"]["name"] == "su1")
    assert su1["spec"]["tier"] == 1
    assert [m["selector"]["exactMatch"]["name"] for m in su1["spec"]["members"]] == ["gpu03"]
    cq = next(o for o in plan.kubernetes.kueue if o["kind"] == "ClusterQueue")
    gpu = [r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu"]
    assert gpu == [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]
    assert [n.name for n in plan.nodes if n.group == "gpu"] == expand("gpu[01-06]")
    assert plan.node("ctl1").address == "10.0.0.10"


def _guide_block(section: str, lang: str) -> str:
    text = (ROOT / "docs" / "user-guide.md").read_text()
    part = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{lang}\n(.*?)```", part, re.DOTALL).group(1)


def test_user_guide_checkpoint_limits_render_as_it_says(lab):
    """The guide's limits, put into the lab spec, give the lines it describes."""
    import yaml

    given = yaml.safe_load(_guide_block("Jobs that checkpoint", "yaml"))["partitions"]["slurm"]
    lab["partitions"]["slurm"]["over_time_limit"] = given["over_time_limit"]
    lab["partitions"]["slurm"]["partitions"] = given["partitions"]
    conf = render(loads_plan(yaml.safe_dump(lab), "guide.yaml"))["slurm/slurm.conf"]
    assert "\nOverTimeLimit=1\n" in conf
    assert ("PartitionName=gpu Nodes=gpu[001-004] Default=NO MaxTime=1-00:00:00 DefaultTime=04:00:00 "
            "GraceTime=120 State=UP") in conf


def test_user_guide_job_script_is_valid_bash(tmp_path):
    import shutil
    import subprocess

    script = _guide_block("Jobs that checkpoint", "bash")
    assert "#SBATCH --signal=B:USR1@300" in script and "scontrol requeue" in script
    bash = shutil.which("bash")
    assert bash, "bash is not installed"
    (tmp_path / "job.sh").write_text(script)
    subprocess.run([bash, "-n", str(tmp_path / "job.sh")], check=True)


def test_readme_links_the_user_guide():
    assert "](docs/user-guide.md)" in (ROOT / "README.md").read_text()


def test_user_guide_accounting_is_valid_and_renders_as_it_says():
    """The guide's accounting, put into the dgx-h100 example, gives the lines and the
    associations it describes."""
    import json

    import yaml

    given = yaml.safe_load(_guide_block("Accounting, fair share and GPU limits", "yaml"))["partitions"]["slurm"]
    spec = yaml.safe_load((ROOT / "inventories" / "dgx-h100" / "cluster.yaml").read_text())
    spec["partitions"]["slurm"]["accounting"] = given["accounting"]
    out = render(loads_plan(yaml.safe_dump(spec), "guide.yaml"))
    conf = out["slurm/slurm.conf"].splitlines()
    for line in ("AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageTRES=gres/gpu",
                 "AccountingStorageEnforce=associations,limits,qos,safe", "PriorityType=priority/multifactor",
                 "PriorityWeightFairshare=10000", "PriorityDecayHalfLife=7-0"):
        assert line in conf, line
    want = json.loads(out["accounting/associations.json"])
    assert want["qos"]["capped"]["MaxTRESPerUser"] == "gres/gpu=8"
    vision = next(a for a in want["accounts"] if a["name"] == "vision")
    assert vision["parent"] == "research" and vision["options"]["GrpTRES"] == "gres/gpu=64"
    bob = next(u for u in want["users"] if u["name"] == "bob")
    assert list(bob["accounts"]) == ["speech", "vision"]

"""Behaviour of the converged lab Slurm partition (controller, login, 4 GPU nodes).

Hosts are reached with testinfra's podman backend (``podman exec``), which is much faster
than going through ``ansible`` for every command.  Expectations come from the molecule
render of the lab plan (plan.json), never from literals here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest
import testinfra
import yaml
from ClusterShell.NodeSet import NodeSet

from tests.support import molecule as support
from tests.support.topology import expected_topology, observed_topology
from tests.support.verify import ARTIFACTS, VARIANT

PLAN = json.loads((ARTIFACTS / "plan.json").read_text())
GROUPS = PLAN["inventory_groups"]
CONTROLLER = GROUPS["slurm_controller"][0]
LOGIN = GROUPS["slurm_login"][0]
COMPUTE = GROUPS["slurm_compute"]


def _inventory_hosts() -> list[str]:
    inv_file = os.environ.get("MOLECULE_INVENTORY_FILE")
    if inv_file and Path(inv_file).exists():
        inv = yaml.safe_load(Path(inv_file).read_text())
        return sorted(inv["all"]["hosts"])
    return sorted([CONTROLLER, LOGIN, *COMPUTE])


HOSTS = _inventory_hosts()


def host(name: str):
    return testinfra.get_host(f"podman://{name}")


def journal(name: str, unit: str) -> str:
    out = host(name).run(f"journalctl -u {unit} --no-pager -n 50")
    return f"\n--- journalctl -u {unit} on {name} ---\n{out.stdout}{out.stderr}"


def run_ok(name: str, cmd: str, unit: str | None = None):
    res = host(name).run(cmd)
    if res.rc != 0:
        extra = journal(name, unit) if unit else ""
        pytest.fail(f"{name}: `{cmd}` exited {res.rc}\n{res.stdout}{res.stderr}{extra}")
    return res.stdout


def wait_for(check, timeout: float = 90, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        ok, last = check()
        if ok:
            return last
        if time.monotonic() > deadline:
            return last
        time.sleep(every)


@pytest.mark.parametrize(
    "name,unit",
    [(n, "munge") for n in HOSTS] + [(CONTROLLER, "slurmctld")] + [(n, "slurmd") for n in COMPUTE],
)
def test_service_running(name, unit):
    svc = host(name).service(unit)
    if not (svc.is_running and svc.is_enabled):
        pytest.fail(
            f"{unit} on {name}: running={svc.is_running} enabled={svc.is_enabled}{journal(name, unit)}"
        )


@pytest.mark.parametrize("name", HOSTS)
def test_munge_key_and_ids(name):
    h = host(name)
    key = h.file("/etc/munge/munge.key")
    assert key.exists
    assert key.mode == 0o400
    assert key.user == "munge" and key.group == "munge"
    assert h.user("munge").uid == 990 and h.group("munge").gid == 990
    assert h.user("slurm").uid == 991 and h.group("slurm").gid == 991
    # the key decodes the credential of another node: one key for the cluster
    cred = run_ok(CONTROLLER, "munge -n", "munge")
    res = h.run(f"echo '{cred.strip()}' | unmunge")
    assert res.rc == 0, (
        f"{name} cannot decode {CONTROLLER}'s credential: {res.stderr}{journal(name, 'munge')}"
    )


def test_slurm_conf_identical_everywhere():
    rendered = hashlib.sha256((ARTIFACTS / "slurm/slurm.conf").read_bytes()).hexdigest()
    sums = {n: run_ok(n, "sha256sum /etc/slurm/slurm.conf").split()[0] for n in HOSTS}
    assert set(sums.values()) == {rendered}, sums


@pytest.mark.parametrize("name", HOSTS)
def test_hosts_block_is_the_plan(name):
    hosts = host(name).file("/etc/hosts").content_string
    for line in (ARTIFACTS / "common/hosts").read_text().splitlines():
        if line and not line.startswith("#"):
            assert line in hosts, f"{name}: /etc/hosts lacks {line!r}"


@pytest.mark.parametrize("name", [CONTROLLER, *COMPUTE])
def test_no_emulator(name):
    h = host(name)
    assert not h.package("slurm-wlm-emulator").is_installed
    daemon = "slurmctld" if name == CONTROLLER else "slurmd"
    assert h.file(f"/usr/sbin/{daemon}").linked_to == f"/usr/sbin/{daemon}-wlm"


def test_sinfo_every_node_idle():
    def check():
        out = host(LOGIN).run("sinfo -h -N -o '%N %t'")
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in COMPUTE), (states, out.stderr)

    states, err = wait_for(check)
    bad = {n: states.get(n) for n in COMPUTE if states.get(n) != "idle"}
    if bad:
        details = "".join(journal(n, "slurmd") for n in bad) + journal(CONTROLLER, "slurmctld")
        pytest.fail(f"not idle: {bad} (sinfo: {states} {err}){details}")


def test_topology_equals_plan():
    """Every switch: its level, every node below it and its child switches."""
    out = run_ok(LOGIN, "scontrol show topology")
    assert observed_topology(out) == expected_topology(support.compiled(VARIANT)), out


def test_srun_four_hosts():
    out = run_ok(LOGIN, f"timeout 60 srun -N{len(COMPUTE)} hostname")
    assert sorted(set(out.split())) == sorted(COMPUTE)
    assert len(out.split()) == len(COMPUTE)


def _job_done(job: str) -> dict[str, str]:
    def check():
        out = host(LOGIN).run(f"scontrol show job {job}")
        fields = dict(re.findall(r"(\w+)=(\S+)", out.stdout))
        return fields.get("JobState") in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, fields

    return wait_for(check, timeout=60)


def test_switches_one_lands_inside_one_su():
    sus = {
        sw["name"]: frozenset(NodeSet(sw["nodes"]))
        for sw in PLAN["slurm"]["switches"]
        if sw.get("nodes")
    }
    job = (
        run_ok(LOGIN, "sbatch --parsable --switches=1 -N2 -o /dev/null --wrap hostname")
        .strip()
        .split(";")[0]
    )
    fields = _job_done(job)
    assert fields.get("JobState") == "COMPLETED", fields
    nodes = frozenset(NodeSet(fields["NodeList"]))
    assert len(nodes) == 2
    assert any(nodes <= members for members in sus.values()), f"{nodes} spans SUs {sus}"
    assert fields.get("Switches", "").startswith("1"), fields


def test_gres_two_standin_gpus():
    out = run_ok(LOGIN, "timeout 60 srun -N1 --gres=gpu:2 sh -c 'echo CVD=$CUDA_VISIBLE_DEVICES'")
    assert "CVD=0,1" in out, out
    # The per-node GRES index is shown while the job runs (cleared once it completes).
    job = run_ok(LOGIN, "sbatch --parsable --gres=gpu:2 -N1 -o /dev/null --wrap 'sleep 60'").strip()
    try:

        def running():
            detail = host(LOGIN).run(f"scontrol show job -d {job}").stdout
            return "JobState=RUNNING" in detail, detail

        detail = wait_for(running, timeout=30, every=0.5)
        assert re.search(r"GRES=gpu:standin:2\(IDX:0-1\)", detail), detail
    finally:
        host(LOGIN).run(f"scancel {job}")


@pytest.mark.parametrize("name", COMPUTE)
def test_standin_gpus_labelled(name):
    h = host(name)
    hostvars = json.loads((ARTIFACTS / f"ansible/host_vars/{name}.json").read_text())
    devices = hostvars["railyard_gpus"]["devices"]
    assert hostvars["railyard_gpus"]["stand_in"]
    kinds = run_ok(name, "stat -L -c '%F' " + " ".join(devices)).splitlines()
    assert kinds == ["character special file"] * len(devices), kinds
    readme = h.file("/etc/slurm/STANDIN-GPUS.README")
    assert readme.exists and "NOT GPUs" in readme.content_string

"""Behaviour of the converged lab Slurm partition (controller, login, 4 GPU nodes).

Hosts are reached with testinfra's podman backend (``podman exec``), which is much faster
than going through ``ansible`` for every command.  Expectations come from the molecule
render of the lab plan (plan.json); the SUs a placement must stay in come from the spec
YAML itself (the variant's dict), never from the compiled plan.
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
    assert observed_topology(out) == expected_topology(support.VARIANTS[VARIANT]()), out


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


# The SUs as the spec YAML writes them (the variant's dict, never the compiled plan): in
# the lab su1 = gpu[001-002], su2 = gpu[003-004] (inventories/lab/cluster.yaml).
SPEC_SUS = {
    su["name"]: frozenset(NodeSet(su["nodes"])) & frozenset(COMPUTE)
    for su in support.VARIANTS[VARIANT]()["fabric"]["rail_optimized"]["scalable_units"]
}


def _job(job: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", host(LOGIN).run(f"scontrol show job {job}").stdout))


def _sbatch(args: str) -> str:
    return run_ok(LOGIN, f"sbatch --parsable -o /dev/null {args}").strip().split(";")[0]


def test_switches_one_waits_for_one_su_where_the_control_spans_two():
    """`--switches=1` is what keeps a job inside one SU: with one node free in su1 and one
    in su2 (the rest of su1 drained, the rest of su2 busy), a plain -N2 job runs at once on
    the cross-SU pair (CONTROL), while the same job with --switches=1@5:00 stays pending
    next to that idle pair and runs on su2 once su2's busy node frees.  Slurm's tree
    plugin picks a fitting leaf by itself, so an idle cluster could not tell them apart."""
    sus = sorted((name, sorted(nodes)) for name, nodes in SPEC_SUS.items() if len(nodes) >= 2)
    assert len(sus) >= 2, SPEC_SUS
    (su_a, in_a), (su_b, in_b) = sus[0], sus[1]
    a1, (b1, b2) = in_a[0], in_b[:2]
    drained = NodeSet.fromlist(sorted(set(COMPUTE) - {a1, b1, b2}))
    blocker = switched = None
    try:
        blocker = _sbatch(f"--exclusive -w {b2} --wrap 'sleep 300'")
        if drained:
            run_ok(
                LOGIN,
                f"scontrol update nodename={drained} state=drain reason=railyard-switches-test",
            )
        busy = wait_for(
            lambda: ((f := _job(blocker)).get("JobState") == "RUNNING", f), timeout=30, every=0.5
        )
        assert busy.get("JobState") == "RUNNING", busy

        control = _job_done(_sbatch("-N2 --wrap hostname"))
        placed = frozenset(NodeSet(control["NodeList"]))
        print(
            f"\nCONTROL -N2 without --switches ({drained} drained, {b2} busy): ran on {control['NodeList']}"
        )
        assert control.get("JobState") == "COMPLETED", control
        assert placed == {a1, b1}, (
            f"expected the cross-SU pair {a1} ({su_a}) + {b1} ({su_b}): {control}"
        )

        switched = _sbatch("-N2 --switches=1@05:00 --wrap hostname")
        time.sleep(5)  # submission and job end each ran the scheduler; it had its chances
        pending = _job(switched)
        idle = run_ok(LOGIN, f"sinfo -h -N -n {a1},{b1} -o '%N %t'").split()
        print(
            f"--switches=1@05:00 with {a1},{b1} idle ({idle}): JobState={pending.get('JobState')} "
            f"Reason={pending.get('Reason')} Switches={pending.get('Switches')}"
        )
        assert pending.get("JobState") == "PENDING", pending
        # idle; "plnd" is idle too: backfill has planned the pending job (22.05's PLANNED)
        assert idle[::2] == [a1, b1] and set(idle[1::2]) <= {"idle", "plnd"}, idle
        assert pending.get("Switches", "").startswith("1@"), pending

        t0 = time.monotonic()
        run_ok(LOGIN, f"scancel {blocker}")
        done = _job_done(switched)
        print(
            f"after {b2} freed: ran on {done.get('NodeList')} ({time.monotonic() - t0:.1f} s later)"
        )
        assert done.get("JobState") == "COMPLETED", done
        assert frozenset(NodeSet(done["NodeList"])) == {b1, b2}, f"expected {su_b} only: {done}"
    finally:
        for job in (blocker, switched):
            if job:
                host(LOGIN).run(f"scancel {job}")
        if drained:
            host(LOGIN).run(f"scontrol update nodename={drained} state=resume")


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

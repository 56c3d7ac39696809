"""End to end on the lab stack with the real Pulumi engine (Automation API, inline program).

The stack lives in a temporary backend and work directory, so a developer's own lab
state is never touched; the containers are the lab's real ones (railyard-lab-*), so the
test refuses to run while a lab is already up. The steps run in file order and share
one stack: up from clean -> Slurm jobs -> Kubernetes nodes Ready, queues Active (while two
jobs run into their time limit) -> no-change preview and refresh -> consecutive
clean drift checks -> two nodes removed by hand, brought back by an up that is interrupted
and run again -> a batch of injected drift found, remediated by `railyard up`, clean again -> destroy leaves nothing.

CI runs 2 consecutive clean checks; ``RAILYARD_E2E_CLEAN_CHECKS=10`` is the long run.
Each step has a time limit that fits what it measures (pytest-timeout): a hang fails in
minutes with the step's name. The module's stack set-up counts toward the first step's
limit and its teardown toward the last one's. Step times go to .railyard/e2e/timings.json.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ClusterShell.NodeSet import NodeSet

from railyard import lifecycle
from railyard.apply.engine import LAB_PASSPHRASE
from railyard.apply.playbooks import LAB_IMAGE, plan_playbooks
from railyard.deploy import automation
from railyard.drift.model import Finding
from railyard.drivers.podman import cleanup, labelled
from railyard.load import load_plan
from railyard.render import render
from tests.conftest import LAB, ROOT
from tests.support import accounting, faults, node_access, pyxis
from tests.support.topology import expected_topology, observed_topology

pytestmark = [pytest.mark.e2e, pytest.mark.podman]
CLUSTER = "lab"
SLURM_ROLES = ("common", "munge", "slurm_controller", "slurm_compute", "slurm_login")
# Issue 5: consecutive drift checks of a clean cluster, none may report drift. The first
# after up from clean has no baselines (every role in check mode, ~100 s on 2 cores), the
# others probe each host once and run Ansible only where something moved (~10 s); CI runs 2 (the
# first and one that starts from its baselines), the long run (RAILYARD_E2E_CLEAN_CHECKS=10) is
# the one that catches a rare false alarm.
CLEAN_CHECKS = int(os.environ.get("RAILYARD_E2E_CLEAN_CHECKS", "2"))
DRIFT_CHECK_S = 240  # the time limit's share per drift check: 70-90 s alone, ~2x beside molecule runs
TIMES: dict[str, float] = {}


class Log:
    """Everything the engine printed, on disk and in memory (shown when a step fails)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        with self.path.open("a") as f:
            f.write(line + "\n")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.lines[-n:])


def _podman(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, input=input)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/setup-podman.sh)")
    if labelled("container", CLUSTER):
        # a required step: it fails rather than skip, naming the fix
        pytest.fail(f"a lab cluster is already up ({', '.join(labelled('container', CLUSTER))}); "
                    "the e2e test uses the same container names: `.venv/bin/railyard destroy --stack lab --yes` first",
                    pytrace=False)
    tmp = tmp_path_factory.mktemp("lab-stack")
    work = tmp / "work"
    work.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.lab.yaml"):
        shutil.copy(ROOT / name, work / name)
    mp = pytest.MonkeyPatch()
    mp.setenv("PULUMI_BACKEND_URL", f"file://{tmp / 'state'}")
    mp.setenv("PULUMI_HOME", str(tmp / "pulumi-home"))
    mp.setenv("PULUMI_CONFIG_PASSPHRASE", LAB_PASSPHRASE)
    # Kept where pytest's temp-dir rotation cannot remove it (other runs rotate those).
    log_path = ROOT / ".railyard" / "e2e" / "lab-stack.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    log = Log(log_path)
    try:
        yield {"work": work, "log": log, "tmp": tmp}
    finally:
        try:
            automation.destroy(CLUSTER, work_dir=work, on_output=log)
        except Exception as exc:  # noqa: BLE001 - the test below says what failed
            print(f"destroy in teardown failed: {exc}", file=sys.stderr)
        cleanup(CLUSTER)  # whatever destroy left: never leave containers behind
        mp.undo()
        # pytest shows teardown output only on failure: the figures also go to a file
        log_path.with_name("timings.json").write_text(json.dumps(TIMES, indent=1) + "\n")
        print(f"\nlab stack timings: {json.dumps(TIMES)}  (log: {log.path})", file=sys.stderr)


def _timed(name: str, fn, *args, **kwargs):
    """Run a verb, keep its wall time; on failure show the end of what the engine printed."""
    from pulumi.automation.errors import CommandError

    t0 = time.monotonic()
    try:
        result = fn(*args, **kwargs)
    except CommandError as exc:
        log = kwargs.get("on_output")
        tail = log.tail(80) if isinstance(log, Log) else ""
        pytest.fail(f"{name} failed: {str(exc)[-3000:]}\n--- engine output (end) ---\n{tail}", pytrace=False)
    TIMES[name] = round(time.monotonic() - t0, 1)
    return result


@pytest.mark.timeout(1800)  # the module's set-up, then every node and role from nothing
def test_up_from_clean(stack: dict) -> None:
    log = stack["log"]
    result = _timed("up_from_clean_s", lifecycle.up, CLUSTER, work_dir=stack["work"], on_output=log)
    assert result.summary.result == "succeeded", log.tail()
    plan = load_plan(LAB)
    for node in plan.nodes:
        container = f"railyard-{CLUSTER}-{node.name}"
        assert _podman("exec", container, "hostname").stdout.strip() == node.name
        assert f"{node.address}/24" in _podman("exec", container, "ip", "-br", "addr").stdout
    outputs = result.outputs
    assert outputs["controller"].value == "ctl1"
    assert outputs["login_command"].value == "podman exec -it railyard-lab-login1 bash"
    assert {n["name"]: n["partition"] for n in outputs["nodes"].value}["gpu003"] == "slurm"
    k8s = outputs["kubernetes"].value
    assert k8s["api_servers"] == [f"https://{next(n.address for n in plan.nodes if n.name == 'kcp1')}:6443"]
    assert k8s["workers"] == ["kw1", "kw2"]
    rails = _podman("exec", "railyard-lab-gpu001", "ip", "-br", "addr").stdout
    assert "rail0" in rails and "rail1" in rails  # the two rail leaves of su1


@pytest.mark.timeout(120)
def test_slurm_job_runs_on_4_nodes(stack: dict) -> None:
    plan = load_plan(LAB)
    planned, _notes = plan_playbooks(plan, ROOT, render(plan))
    assert set(SLURM_ROLES) <= {p.role for p in planned}, "the lab plan must run every Slurm role"
    proc = _podman("exec", "railyard-lab-login1", "srun", "-N4", "hostname", check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    # the live topology is the plan's: every switch with its nodes and children
    topo = _podman("exec", "railyard-lab-login1", "scontrol", "show", "topology").stdout
    assert observed_topology(topo) == expected_topology(yaml.safe_load(LAB.read_text())), topo


def _job(job: str) -> dict[str, str]:
    proc, _ = _login("scontrol", "show", "job", job)
    return dict(re.findall(r"(\w+)=(\S+)", proc.stdout))


def _sbatch(*args: str) -> str:
    proc, _ = _login("sbatch", "--parsable", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _wait_job(job: str, states: set[str], timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while (fields := _job(job)).get("JobState") not in states and time.monotonic() < deadline:
        time.sleep(1)
    return fields


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


@pytest.mark.timeout(180)
def test_switches_keeps_a_job_in_one_su(stack: dict) -> None:
    """`--switches=1` keeps a job inside one SU, where first fit would not: with one node
    free in su1 and one in su2 (the rest of su1 drained, the rest of su2 busy), a plain -N2
    job runs at once on the cross-SU pair (the CONTROL), while the same job with
    --switches=1@5:00 stays pending beside that idle pair and runs in su2 once su2's busy
    node frees. On an idle cluster the tree plugin picks one leaf by itself, so only this
    arrangement tells them apart. SUs from the spec's YAML (su1 = gpu[001-002], su2 =
    gpu[003-004]), not from the compiler."""
    spec = yaml.safe_load(LAB.read_text())
    sus = [sorted(NodeSet(su["nodes"]) & NodeSet("gpu[001-004]"))
           for su in spec["fabric"]["rail_optimized"]["scalable_units"]]
    assert sus == [["gpu001", "gpu002"], ["gpu003", "gpu004"]], sus
    (a1, a2), (b1, b2) = sus
    blocker = switched = None
    try:
        blocker = _sbatch("-o", "/dev/null", "--exclusive", "-w", b2, "--wrap", "sleep 300")
        _login("scontrol", "update", f"nodename={a2}", "state=drain", "reason=railyard-e2e-switches")
        assert _wait_job(blocker, {"RUNNING"}, 30).get("JobState") == "RUNNING"
        control = _wait_job(_sbatch("-o", "/dev/null", "-N2", "--wrap", "hostname"), FINISHED)
        print(f"\nCONTROL -N2 without --switches ({a2} drained, {b2} busy): ran on {control.get('NodeList')}")
        assert control.get("JobState") == "COMPLETED", control
        assert set(NodeSet(control["NodeList"])) == {a1, b1}, control

        switched = _sbatch("-o", "/dev/null", "-N2", "--switches=1@05:00", "--wrap", "hostname")
        time.sleep(5)  # submission and the control's end each ran the scheduler
        pending = _job(switched)
        print(f"--switches=1@05:00 with {a1},{b1} idle: JobState={pending.get('JobState')} "
              f"Reason={pending.get('Reason')}")
        assert pending.get("JobState") == "PENDING", pending
        assert pending.get("Switches", "").startswith("1@"), pending
        _login("scancel", blocker)
        done = _wait_job(switched, FINISHED)
        assert done.get("JobState") == "COMPLETED", done
        assert set(NodeSet(done["NodeList"])) == {b1, b2}, f"expected su2 only: {done}"
    finally:
        for job in (blocker, switched):
            if job:
                _login("scancel", job)
        _login("scontrol", "update", f"nodename={a2}", "state=resume")


# A batch job that checkpoints on USR1: it records when the signal came (seconds after it
# started), then keeps working until Slurm ends it.
# The checkpointing jobs' limit and warning (seconds). slurmctld looks at time limits every
# 30 s (docs/user-guide.md, "Jobs that checkpoint"); a one-minute job with USR1@45 left one or
# two looks in which to warn, and in a loaded run on 2026-12-07 it got no USR1 at all
# (slurmctld logged its start and its TIMEOUT, nothing between). Two minutes and a warning
# 90 s before the limit leave three or four.
CKPT_LIMIT_S, CKPT_WARN_S = 120, 90
CHECKPOINTING_JOB = """#!/bin/bash
start=$(date +%s)
trap 'echo "USR1 after $(( $(date +%s) - start )) s"' USR1
echo started
while true; do sleep 1; done
"""


# A real MPI program: every rank reports its host, and an Allreduce over all ranks proves
# they talk to each other (the sum of 0..n-1), not only that srun started n processes.
MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
"""


def _login(*cmd: str, input: str | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = _podman("exec", "-i", "railyard-lab-login1", *cmd, check=False, input=input)
    return proc, round(time.monotonic() - t0, 2)


@pytest.mark.timeout(420)  # a crashed try waits up to 32 s for its step to end
def test_pmix_mpi_job_runs_on_4_nodes(stack: dict) -> None:
    """`srun --mpi=pmix -N4 -n8` of an MPI program compiled on the login node with Debian's
    OpenMPI (from the shared /home, which every node sees): 8 ranks, 2 on each compute node,
    one communicator. The spec's mpi_default reaches MpiDefault, so plain srun uses PMIx too."""
    spec = yaml.safe_load(LAB.read_text())
    assert spec["partitions"]["slurm"]["mpi_default"] == "pmix"
    conf, _ = _login("scontrol", "show", "config")
    assert "MpiDefault              = pmix" in conf.stdout, conf.stdout
    src = "/home/railyard-e2e/mpi_hello.c"
    made, _ = _login("bash", "-c", f"mkdir -p /home/railyard-e2e && cat > {src} && mpicc -O2 -o /home/railyard-e2e/mpi_hello {src}",
                     input=MPI_HELLO)
    assert made.returncode == 0, made.stderr
    plain, t_plain = _login("srun", "-N4", "hostname")
    assert plain.returncode == 0, plain.stderr
    runs = {}
    # Open MPI's TCP transport on the management network only: the lab's rails are podman
    # networks, one per leaf, not routed between SUs (on a site they carry RDMA).
    # Open MPI 5.0.7 (Debian 13) sometimes segfaults inside MPI_Init on this loaded 2-core
    # machine, in mca_pml_ob1_recv_frag_callback_match (measured: 1 to 8 runs in 20 with any
    # transport setting; open-mpi/ompi#12495 reports the same on real clusters). That crash,
    # and only that one, gets up to four more tries (CI saw it three times in a row once);
    # the count is printed.
    crashes = 0
    for label, mpi in (("pmix", ["--mpi=pmix"]), ("default", [])):
        for _attempt in range(5):
            proc, secs = _login("env", "OMPI_MCA_btl_tcp_if_include=eth0", "srun", *mpi, "-N4", "-n8",
                                "/home/railyard-e2e/mpi_hello")
            if proc.returncode == 0 or "mca_pml_ob1_recv_frag_callback_match" not in proc.stderr:
                break
            crashes += 1
        assert proc.returncode == 0, f"srun {label}: {proc.stderr}"
        ranks = sorted(line.split() for line in proc.stdout.splitlines() if line.startswith("rank "))
        got = {int(r[1]): (r[3], r[5], r[7]) for r in ranks}
        assert sorted(got) == list(range(8)), proc.stdout
        assert {size for size, _h, _s in got.values()} == {"8"}
        assert {s for _size, _h, s in got.values()} == {str(sum(range(8)))}  # every rank saw the Allreduce
        per_host = {h: sum(1 for _s, host, _x in got.values() if host == h) for _s, h, _x in got.values()}
        assert per_host == {"gpu001": 2, "gpu002": 2, "gpu003": 2, "gpu004": 2}, proc.stdout
        runs[label] = secs
    TIMES.update(srun_n4_hostname_s=t_plain, srun_pmix_n4_n8_mpi_s=runs["pmix"], mpi_init_crashes_retried=crashes)
    print(f"\nsrun -N4 hostname: {t_plain} s; srun --mpi=pmix -N4 -n8 (MPI Allreduce): {runs['pmix']} s; "
          f"with MpiDefault: {runs['default']} s (podman exec included); Open MPI init crashes retried: {crashes}")


# The Enroot image scripts/build-container-image.sh builds offline (bootstrap's vendor step)
# from Debian's busybox-static; no registry serves images here. `make lab` copies it to the
# shared storage as this test does.
SHARED_IMAGE = "/shared/images/busybox.sqsh"


@pytest.mark.timeout(240)
def test_pyxis_runs_real_containers_on_4_nodes(stack: dict) -> None:
    """srun --container-image with a squashfs on the shared storage: Pyxis (built against
    this Slurm 24.11) has Enroot start the image on all 4 compute nodes; --container-mounts
    brings the shared /home (written on the login node) in; a named container keeps its
    files between the steps of a job and, with container_scope=global, for the next job on
    that node, which then starts without unpacking the image again (tests/support/pyxis.py;
    molecule/slurm_cluster runs the same checks on the roles' cluster)."""
    assert pyxis.BUILT_IMAGE.is_file(), f"{pyxis.BUILT_IMAGE} is missing: run scripts/build-container-image.sh"
    _podman("exec", "railyard-lab-login1", "mkdir", "-p", "/shared/images")
    _podman("cp", str(pyxis.BUILT_IMAGE), f"railyard-lab-login1:{SHARED_IMAGE}")
    lab = pyxis.Cluster(login="railyard-lab-login1", compute=[f"gpu00{i}" for i in range(1, 5)],
                        container=lambda node: f"railyard-{CLUSTER}-{node}", image=SHARED_IMAGE)
    t_container, t_plain = pyxis.runs_on_every_node(lab)
    token = f"railyard-{os.getpid()}-{time.monotonic_ns()}"
    _login("bash", "-c", f"mkdir -p /home/railyard-pyxis && echo {token} > /home/railyard-pyxis/token")
    pyxis.mounts_bring_home_in(lab, token)
    pyxis.named_container_persists_and_is_reused(lab, f"e2e{os.getpid()}")
    TIMES.update(srun_n4_container_s=t_container, srun_n4_plain_sh_s=t_plain)
    print(f"\nsrun -N4 in a container: {t_container} s; the same without: {t_plain} s (podman exec included)")


def _accounting() -> accounting.Cluster:
    spec = yaml.safe_load(LAB.read_text())
    slurm = spec["partitions"]["slurm"]
    nodes = [*NodeSet(slurm["controllers"]), *NodeSet(slurm["login"]),
             *(n for p in slurm["partitions"] for n in NodeSet(p["nodes"]))]
    c = accounting.Cluster(login="railyard-lab-login1", nodes=nodes, container=lambda n: f"railyard-{CLUSTER}-{n}",
                           accounting=slurm["accounting"])
    c.ensure_users(next(iter(NodeSet(slurm["controllers"]))))
    return c


@pytest.mark.timeout(180)
def test_sacct_records_a_users_gpus_and_a_gpu_limit_holds_with_the_qos_reason(stack: dict) -> None:
    """slurmdbd on the controller records alice's finished job with her account and its
    gres/gpu TRES; the spec's QOS capped holds her GPU job beyond the cap (QOSMaxGRESPerUser)
    while bob's identical job runs, and releases it when her first job ends."""
    c = _accounting()
    t0 = time.monotonic()
    row = accounting.sacct_records_gpus(c, "alice")
    reason = accounting.gpu_limit_holds_then_frees(c, "alice", "bob", "capped")
    TIMES["accounting_checks_s"] = round(time.monotonic() - t0, 1)
    print(f"\nsacct: {row}\nheld: JobState={reason.get('JobState')} Reason={reason.get('Reason')}")


@pytest.mark.timeout(420)  # usage, up to two PriorityCalcPeriods (1 min in the lab) for its factors, the queue
def test_fair_share_starts_the_larger_share_first(stack: dict) -> None:
    """team-a and team-b have shares 3:1 in the spec; after equal use, bob's (team-b) job
    submitted first waits while alice's (team-a) submitted after it starts first."""
    c = _accounting()
    t0 = time.monotonic()
    spec = yaml.safe_load(LAB.read_text())
    hw = next(g["hardware"] for g in spec["nodes"] if g["group"] == "gpu")
    got = accounting.fair_share_orders_the_queue(c, heavy="alice", light="bob", partition_nodes=4,
                                                 node_cpus=hw["sockets"] * hw["cores_per_socket"] * hw["threads_per_core"])
    TIMES["fair_share_s"] = round(time.monotonic() - t0, 1)
    print(f"\nfair share: {json.dumps(got, indent=1)}")


@pytest.mark.timeout(180)
def test_ssh_to_a_compute_node_needs_a_job_there_and_ends_with_it(stack: dict) -> None:
    """pam_slurm_adopt (the spec's partitions.slurm.pam_slurm_adopt), with real users and keys
    from login1: alice is refused on gpu004 and gpu003 with Slurm's message; with a job on
    gpu004 she gets in there, into the job's extern step, and is still refused on gpu003
    (the control); her open session ends with the job. root and a member of the spec's admin
    group get in without a job. And the job's cgroup holds only its GPUs (ConstrainDevices)."""
    c = _accounting()
    spec = yaml.safe_load(LAB.read_text())
    slurm = spec["partitions"]["slurm"]
    gpus = next(g["hardware"]["gpus"]["count"] for g in spec["nodes"] if g["group"] == "gpu")
    a = node_access.Access(login=next(iter(NodeSet(slurm["login"]))), compute=["gpu004", "gpu003"],
                           container=lambda n: f"railyard-{CLUSTER}-{n}",
                           admin_group=slurm["pam_slurm_adopt"]["admin_group"])
    t0 = time.monotonic()
    seen = node_access.no_job_is_refused_a_job_lets_in_and_its_end_ends_the_session(
        a, "alice", c.sbatch, lambda job: c.on_login("scancel", job))
    node_access.root_and_the_admin_group_get_in_without_a_job(a, "carol")
    devices = node_access.a_job_opens_only_its_gpus(a, "alice", lambda u, *args: c.as_user(u, "srun", *args),
                                                    [f"/dev/nvidia{i}" for i in range(gpus)])
    TIMES["ssh_adopt_checks_s"] = round(time.monotonic() - t0, 1)
    print(f"\nadopted: {json.dumps(seen)}\nopen() per GPU count: {json.dumps(devices)}")


@pytest.mark.timeout(60)
def test_checkpointing_jobs_submitted(stack: dict) -> None:
    """docs/user-guide.md "Jobs that checkpoint": `--signal=B:USR1@90` with a two-minute
    limit, and the same job without it as the control. They take three minutes (the limit
    and the spec's over_time_limit), so they run while the Kubernetes steps and the
    no-change preview below (which use no Slurm node) do;
    test_signal_before_the_time_limit_then_the_end reads how they ended."""
    spec = yaml.safe_load(LAB.read_text())
    over = int(spec["partitions"]["slurm"]["over_time_limit"]) * 60
    conf, _ = _login("scontrol", "show", "config")
    assert re.search(rf"^OverTimeLimit\s+=\s+{over // 60} min", conf.stdout, re.MULTILINE), conf.stdout
    out = "/home/railyard-e2e"
    _login("mkdir", "-p", out)
    jobs = {}
    for label, node, extra in (("signalled", "gpu001", [f"--signal=B:USR1@{CKPT_WARN_S}"]), ("control", "gpu002", [])):
        proc, _ = _login("sbatch", "--parsable", "-N1", "-w", node, f"--time={CKPT_LIMIT_S // 60}", *extra,
                         "-o", f"{out}/ckpt-%j.out", input=CHECKPOINTING_JOB)
        assert proc.returncode == 0, proc.stderr
        jobs[label] = proc.stdout.strip().split(";")[0]
    stack["checkpointing"] = {"jobs": jobs, "over": over, "out": out}


@pytest.mark.timeout(420)  # two pods started (up to 90 s each), then logs and exec on each
def test_kubernetes_partition_serves_the_plan(stack: dict) -> None:
    """pulumi up leaves a control plane whose workers are Ready with the plan's labels, each
    running a container that `kubectl logs` and `kubectl exec` reach (the apiserver's kubelet
    client certificate; each kubelet's serving certificate from the cluster CA), whose
    ClusterQueues are Active and whose Volcano Queues are Open (scheduling itself:
    molecule/kubernetes, test_k8s_scheduling)."""
    plan = load_plan(LAB)
    assert plan.kubernetes is not None

    def kubectl(*args: str) -> dict:
        return json.loads(_podman("exec", "railyard-lab-kcp1", "kubectl", *args, "-o", "json").stdout)

    nodes = {n["metadata"]["name"]: n for n in kubectl("get", "nodes")["items"]}
    assert sorted(nodes) == sorted(plan.kubernetes.workers)
    for name, node in nodes.items():
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", (name, ready)
        labels = node["metadata"]["labels"]
        assert {k: labels.get(k) for k in plan.kubernetes.labels[name]} == plan.kubernetes.labels[name]
        # real kubelets with Debian's containerd, and the plan's GPUs
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://"), node["status"]
        gpus = (plan.inventory.hostvars[name].get("railyard_gpus") or {}).get("count", 0)
        assert node["status"]["allocatable"].get("nvidia.com/gpu", "0") == str(gpus)
    # a container really runs on each worker (the image is the locally built one)
    for name in nodes:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"probe-{name}", "namespace": "default"},
               "spec": {"nodeName": name, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": LAB_IMAGE, "imagePullPolicy": "Never",
                                        "command": ["sh", "-c", f"echo started on {name}; sleep 600"]}]}}
        _podman("exec", "-i", "railyard-lab-kcp1", "kubectl", "apply", "-f", "-", input=json.dumps(pod))
    t0 = time.monotonic()
    for name in nodes:
        _podman("exec", "railyard-lab-kcp1", "kubectl", "wait", f"pod/probe-{name}", "--for=jsonpath={.status.phase}=Running",
                "--timeout=90s")
    print(f"\na pod Running on each of {sorted(nodes)} within {time.monotonic() - t0:.1f} s")
    # the apiserver reaches every kubelet: logs and exec (not /var/log/pods on the node)
    t0 = time.monotonic()
    for name in nodes:
        logs = ""
        for _ in range(20):  # the container's line may land a moment after Running
            got = _podman("exec", "railyard-lab-kcp1", "kubectl", "logs", f"probe-{name}", "-c", "c", check=False)
            assert got.returncode == 0, (name, got.stdout, got.stderr)
            if (logs := got.stdout.strip()):
                break
            time.sleep(0.5)
        assert logs == f"started on {name}", (name, logs)
        # the pod's hostname is its name: the command ran in that pod's container
        got = _podman("exec", "railyard-lab-kcp1", "kubectl", "exec", f"probe-{name}", "-c", "c", "--", "hostname",
                      check=False)
        assert (got.returncode, got.stdout.strip()) == (0, f"probe-{name}"), (name, got.stdout, got.stderr)
    print(f"kubectl logs and exec reached each of {sorted(nodes)} within {time.monotonic() - t0:.1f} s")
    for name in nodes:
        _podman("exec", "railyard-lab-kcp1", "kubectl", "delete", "pod", f"probe-{name}", "--grace-period=0", "--force")
    for cq in (o for o in plan.kubernetes.kueue if o["kind"] == "ClusterQueue"):
        got = kubectl("get", "clusterqueue", cq["metadata"]["name"])
        active = next(c for c in got["status"]["conditions"] if c["type"] == "Active")
        assert active["status"] == "True", got["status"]
    # vc-controller-manager opens each compiled Volcano Queue; vc-scheduler made its root queue
    for q in (o for o in plan.kubernetes.volcano if o["kind"] == "Queue"):
        got = kubectl("get", "queues.scheduling.volcano.sh", q["metadata"]["name"])
        assert got.get("status", {}).get("state") == "Open", got.get("status")
    assert kubectl("get", "queues.scheduling.volcano.sh", "root")["metadata"]["name"] == "root"


def _kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _podman("exec", "-i", "railyard-lab-kcp1", "kubectl", *args, input=input, check=check)


def _pods(namespace: str, selector: str) -> list[dict]:
    return json.loads(_kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# The rendezvous of a 2-rank job, as torchrun does it: MASTER_ADDR is rank 0's name under
# the job's headless Service (the lab's namespace and the default cluster domain), resolved
# by the cluster DNS; rank 1 connects to it and sends its token, rank 0 answers with its own
# on the same connection. Both print what they got. (busybox's nslookup asks the DNS server
# itself; its nc, linked statically, resolves no names, so it is given the address.)
RDZV_SCRIPT = r"""
set -u
me="rank$JOB_COMPLETION_INDEX@$(hostname)"
MASTER_ADDR=ring-0.ring.team-a.svc.cluster.local
addr=""
for i in $(seq 60); do
  addr=$(nslookup -type=a "$MASTER_ADDR" 2>/dev/null | sed -n 's/^Address: //p' | tail -n 1)
  [ -n "$addr" ] && break; sleep 1
done
echo "resolved $MASTER_ADDR: $addr"
got=""
if [ "$JOB_COMPLETION_INDEX" = 0 ]; then
  got=$(echo "$me" | nc -l -p 29500 -w 60)
else
  for i in $(seq 60); do
    got=$(echo "$me" | nc -w 5 "$addr" 29500) && [ -n "$got" ] && break; sleep 1
  done
fi
echo "got: $got"
[ -n "$got" ]
"""


@pytest.mark.timeout(420)  # CoreDNS Ready, 10 pods, then the 2-pod job from admission to done
def test_pods_reach_each_other_by_dns_name(stack: dict) -> None:
    """Issue 22 item 3: the pod network spans the workers and CoreDNS answers for Services.

    An Indexed Job of 2 ranks, one whole node (2 GPUs) each, so on kw1 and kw2, queued to
    Kueue with the required-topology annotation, rendezvous through a headless Service by
    rank 0's DNS name and exchange tokens over TCP. The lab's two workers are in different
    SUs (su1, su2: the placement tests need that), so the job requires the spine level both
    share; the CONTROL, the same job requiring one SU, is not admitted (4 GPUs are in no
    single SU), so the annotation is what Kueue placed by. Also measured: pod start on a
    real kubelet (10 pods) and Kueue admission to both ranks Running."""
    plan = load_plan(LAB)
    assert plan.kubernetes is not None
    net = plan.kubernetes.network
    spine_key, su_key = "topology.railyard.dev/spine", "topology.railyard.dev/su"  # the lab spec's levels
    ns, queue = "team-a", "gpu"  # the lab spec's local queue
    # CoreDNS runs on the kubelet workers behind the kube-dns Service at the plan's address
    _kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")
    svc = json.loads(_kubectl("-n", "kube-system", "get", "service", "kube-dns", "-o", "json").stdout)
    assert svc["spec"]["clusterIP"] == "10.96.0.10" == net.cluster_dns

    # pod start on a real kubelet: 10 pods, 5 on each worker, created at once
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"start-{i}", "namespace": "default", "labels": {"railyard-test": "start"}},
             "spec": {"nodeName": ("kw1", "kw2")[i % 2], "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                      "containers": [{"name": "c", "image": LAB_IMAGE, "imagePullPolicy": "Never",
                                      "command": ["sleep", "600"]}]}} for i in range(10)]
    t0 = time.monotonic()
    _kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    started: dict[str, float] = {}
    while len(started) < len(pods) and time.monotonic() - t0 < 120:
        for p in _pods("default", "railyard-test=start"):
            if p["status"].get("phase") == "Running" and p["metadata"]["name"] not in started:
                started[p["metadata"]["name"]] = time.monotonic() - t0
        time.sleep(0.25)
    assert len(started) == len(pods), f"Running after 120 s: {sorted(started)}"
    ips = {p["metadata"]["name"]: (p["spec"]["nodeName"], p["status"]["podIP"]) for p in _pods("default", "railyard-test=start")}
    _kubectl("delete", "pods", "-n", "default", "-l", "railyard-test=start", "--grace-period=0", "--force", "--wait=false")
    secs = list(started.values())
    TIMES.update(pod_start_median_s=round(_percentile(secs, 0.5), 2), pod_start_p90_s=round(_percentile(secs, 0.9), 2))
    print(f"\n10 pods Running on real kubelets: median {_percentile(secs, 0.5):.2f} s, p90 {_percentile(secs, 0.9):.2f} s")
    # each pod's address is in its node's block of the plan's pod network
    for name, (node, ip) in ips.items():
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(net.pod_cidrs[node]), (name, node, ip)

    def job(name: str, level: str) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
                "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                         "suspend": True,
                         "template": {
                             "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}},
                             "spec": {"subdomain": "ring", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                      "containers": [{"name": "rank", "image": LAB_IMAGE, "imagePullPolicy": "Never",
                                                      "command": ["sh", "-c", RDZV_SCRIPT],
                                                      "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}

    headless = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ring", "namespace": ns},
                "spec": {"clusterIP": "None", "selector": {"job-name": "ring"}, "publishNotReadyAddresses": True,
                         "ports": [{"name": "rdzv", "port": 29500}]}}
    _kubectl("apply", "-f", "-", input=json.dumps(headless))
    # CONTROL: one SU holds 2 GPUs in the lab, the job needs 4: Kueue does not admit it
    _kubectl("apply", "-f", "-", input=json.dumps(job("ring-one-su", su_key)))
    t0 = time.monotonic()
    _kubectl("apply", "-f", "-", input=json.dumps(job("ring", spine_key)))
    _kubectl("-n", ns, "wait", "job/ring", "--for=jsonpath={.spec.suspend}=false", "--timeout=60s")
    admitted = time.monotonic() - t0
    while time.monotonic() - t0 < 120:
        ranks = _pods(ns, "job-name=ring")
        if len(ranks) == 2 and all(p["status"].get("phase") in ("Running", "Succeeded") for p in ranks):
            break
        time.sleep(0.25)
    running = time.monotonic() - t0
    _kubectl("-n", ns, "wait", "job/ring", "--for=condition=Complete", "--timeout=120s")
    TIMES.update(kueue_admitted_s=round(admitted, 2), kueue_admitted_to_running_s=round(running - admitted, 2))
    print(f"2-rank job: admitted by Kueue after {admitted:.2f} s, both ranks Running {running - admitted:.2f} s later")
    ranks = {int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p for p in _pods(ns, "job-name=ring")}
    assert sorted(ranks) == [0, 1]
    assert {ranks[i]["spec"]["nodeName"] for i in ranks} == {"kw1", "kw2"}, "a whole node each"
    logs = {i: _kubectl("-n", ns, "logs", p["metadata"]["name"]).stdout for i, p in ranks.items()}
    for i in ranks:
        # rank 0's name resolved to rank 0's pod address, and each got the other's token (an
        # Indexed Job's pod is named <job>-<index> as its hostname)
        assert f"resolved ring-0.ring.team-a.svc.cluster.local: {ranks[0]['status']['podIP']}" in logs[i], logs[i]
        assert f"got: rank{1 - i}@ring-{1 - i}" in logs[i], logs[i]
    control = json.loads(_kubectl("-n", ns, "get", "job", "ring-one-su", "-o", "json").stdout)
    assert control["spec"]["suspend"] is True, "a job needing 4 GPUs in one SU of 2 was admitted"
    _kubectl("-n", ns, "delete", "job", "ring", "ring-one-su", "--wait=false")
    _kubectl("-n", ns, "delete", "service", "ring")


@pytest.mark.timeout(300)
def test_no_change_preview_and_refresh(stack: dict) -> None:
    log = stack["log"]
    preview = _timed("preview_no_change_s", automation.preview, CLUSTER, expect_no_changes=True,
                     work_dir=stack["work"], on_output=log)
    assert set(preview.change_summary) == {"same"}, preview.change_summary
    refresh = _timed("refresh_no_change_s", automation.refresh, CLUSTER, expect_no_changes=True,
                     work_dir=stack["work"], on_output=log)
    assert set(refresh.summary.resource_changes or {}) == {"same"}


@pytest.mark.timeout(420)  # up to the jobs' limit, over_time_limit and KillWait after their submission
def test_signal_before_the_time_limit_then_the_end(stack: dict) -> None:
    """The jobs of test_checkpointing_jobs_submitted: the signalled one gets USR1 before the
    limit, the control none; both end as TIMEOUT once the limit and over_time_limit are past."""
    if "checkpointing" not in stack:
        pytest.fail("test_checkpointing_jobs_submitted did not submit the jobs")
    jobs, over, out = (stack["checkpointing"][k] for k in ("jobs", "over", "out"))
    try:
        ended = {label: _wait_job(job, FINISHED, timeout=CKPT_LIMIT_S + over + 120) for label, job in jobs.items()}
        logs = {label: _login("cat", f"{out}/ckpt-{job}.out")[0].stdout for label, job in jobs.items()}
        print(f"\nsignalled: {logs['signalled'].split()} RunTime={ended['signalled'].get('RunTime')}; "
              f"control: {logs['control'].split()} RunTime={ended['control'].get('RunTime')}")
        for label, fields in ended.items():
            assert fields.get("JobState") == "TIMEOUT", (label, fields)
            h, m, sec = (int(x) for x in fields["RunTime"].split(":"))
            run = h * 3600 + m * 60 + sec
            # ended after the limit and the over-time, within slurmctld's 30 s check interval
            # and KillWait (30 s) of it
            assert CKPT_LIMIT_S + over <= run <= CKPT_LIMIT_S + over + 70, (label, fields["RunTime"])
            assert "CANCELLED AT" in logs[label] and "DUE TO TIME LIMIT" in logs[label], logs[label]
        got = re.findall(r"USR1 after (\d+) s", logs["signalled"])
        assert len(got) == 1 and int(got[0]) < CKPT_LIMIT_S, logs["signalled"]
        assert "USR1" not in logs["control"], logs["control"]
        TIMES.update(usr1_after_s=int(got[0]))
    finally:
        for job in jobs.values():
            _login("scancel", job)


def _drift(stack: dict, name: str) -> tuple[int, dict]:
    """`railyard drift` as an operator runs it (every layer, --json); (exit code, document)."""
    t0 = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "railyard"), "drift", str(LAB), "--stack", CLUSTER, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    TIMES.setdefault(name, []).append(round(time.monotonic() - t0, 1))
    stack["log"](f"--- drift ({name}): exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}")
    assert proc.returncode in (0, 2), f"the drift check could not finish ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def _findings(doc: dict) -> list[Finding]:
    return [Finding(**f) for f in doc["findings"]]


@pytest.mark.timeout(CLEAN_CHECKS * DRIFT_CHECK_S)
def test_clean_cluster_has_no_drift(stack: dict) -> None:
    for i in range(CLEAN_CHECKS):
        code, doc = _drift(stack, "drift_clean_s")
        assert (code, doc["status"], doc["findings"], doc["errors"]) == (0, "clean", [], []), f"check {i + 1}: {doc}"
        assert doc["layers"] == ["nodes", "files", "slurm", "kubernetes"]


@pytest.mark.timeout(1200)  # refresh, an up cut short, then two nodes' roles from nothing
def test_nodes_removed_by_hand_come_back_through_an_interrupted_up(stack: dict) -> None:
    """A Slurm and a Kubernetes node removed by hand: refresh sees both gone. Then Ctrl-C in
    the middle of the up that creates them again (SIGINT to the process group, as a terminal
    sends it), and the next up finishes: both nodes back, new containers, the roles run on
    them from nothing. No drift check before either up (remediate=False): this is Pulumi's
    own recovery (test_injected_drift_is_found_and_remediated has the check)."""
    log = stack["log"]
    gone = ["gpu002", "kw1"]
    before = {}
    for name in gone:
        before[name] = _podman("inspect", "--format", "{{.Id}}", f"railyard-lab-{name}").stdout.strip()
        _podman("rm", "--force", f"railyard-lab-{name}")
    refresh = _timed("refresh_nodes_gone_s", automation.refresh, CLUSTER, work_dir=stack["work"], on_output=log)
    assert refresh.summary.resource_changes.get("delete") == len(gone), log.tail()
    for name in gone:
        assert any(f"{name}: gone" in line for line in log.lines), f"refresh did not say {name} is gone"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from railyard import lifecycle as a\n"
        "sys.exit(a._run(lambda: a.up('lab', refresh=True, remediate=False, work_dir=Path(sys.argv[1]))))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(stack["work"])], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=os.environ.copy())
    assert proc.stdout is not None
    for line in proc.stdout:
        log(line.rstrip())
        if "metal:Node" in line and "creating" in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    for line in rest.splitlines():
        log(line)
    assert proc.returncode != 0, "the interrupted up should not report success"
    up = _timed("up_after_interrupt_s", lifecycle.up, CLUSTER, refresh=True, remediate=False,
                work_dir=stack["work"], on_output=log)
    assert up.summary.result == "succeeded", log.tail()
    for name in gone:
        after = _podman("inspect", "--format", "{{.Id}}", f"railyard-lab-{name}").stdout.strip()
        assert after and after != before[name], f"{name}: not a new container"
        assert _podman("exec", f"railyard-lab-{name}", "hostname").stdout.strip() == name
    _timed("preview_after_interrupt_s", automation.preview, CLUSTER, expect_no_changes=True,
           work_dir=stack["work"], on_output=log)


@pytest.mark.timeout(600 + 3 * DRIFT_CHECK_S)  # 3 checks; up: a check, kw1 anew, roles
def test_injected_drift_is_found_and_remediated(stack: dict) -> None:
    """Every fault of tests/support/faults.py in one batch -> one check finds each, with
    its message, and nothing else -> `railyard up` (drift check, then the roles on the
    drifted hosts, refresh for the deleted node) -> the next check shows only what up
    leaves on purpose (the operator's drain) -> resumed by hand -> clean."""
    log = stack["log"]
    for fault in faults.FAULTS:
        fault.inject()
    code, doc = _drift(stack, "drift_injected_s")
    found = _findings(doc)
    assert code == 2 and doc["errors"] == [], doc
    assert faults.missed(found, faults.FAULTS) == [], "\n".join(f.line for f in found)
    assert faults.unexplained(found, faults.FAULTS) == [], "false alarms"
    for f in found:
        assert f.fix, f"{f.line}: no fix said"

    up = _timed("up_remediate_s", lifecycle.up, CLUSTER, work_dir=stack["work"], on_output=log)
    assert up.summary.result == "succeeded", log.tail()
    assert up.summary.resource_changes.get("create") == 1, up.summary.resource_changes  # kw1's container
    # the roles that restore each fault ran where it was found (kw1 came back from nothing)
    for role, host in (("munge", "gpu004"), ("slurm_login", "login1"), ("k8s_worker", "kw2"), ("kueue", "kcp1"),
                       ("volcano", "kcp1")):
        assert any(line.startswith(f"railyard: re-running role {role} on ") and host in line.split(" on ", 1)[1]
                   for line in log.lines), f"role {role} was not re-run on {host}:\n{log.tail()}"

    kept = [f for f in faults.FAULTS if not f.remediated_by_up]
    code, doc = _drift(stack, "drift_after_up_s")
    left = _findings(doc)
    assert faults.missed(left, kept) == [] and faults.unexplained(left, kept) == [], \
        "\n".join(f.line for f in left)
    _podman("exec", faults.container("ctl1"), "scontrol", "update", "nodename=gpu003", "state=resume")
    # slurmctld clears a stale NOT_RESPONDING at the node's next answer, a second or so
    # after the resume (seen in CI: "gpu003 is NOT_RESPONDING" from a check started at once)
    deadline = time.monotonic() + 60
    while (state := _podman("exec", faults.container("ctl1"), "sinfo", "-h", "-N", "-n", "gpu003", "-o", "%T",
                            check=False).stdout.strip()) != "idle" and time.monotonic() < deadline:
        time.sleep(1)
    assert state == "idle", f"gpu003 did not come back in service after the resume: {state}"
    code, doc = _drift(stack, "drift_after_resume_s")
    assert (code, doc["findings"], doc["errors"]) == (0, [], []), doc
    proc = _podman("exec", "railyard-lab-login1", "srun", "-N4", "hostname", check=False)
    assert proc.returncode == 0 and sorted(proc.stdout.split()) == ["gpu001", "gpu002", "gpu003", "gpu004"], proc


@pytest.mark.timeout(300 + 2 * DRIFT_CHECK_S)
def test_a_stopped_slurmdbd_is_found_and_restarted(stack: dict) -> None:
    """slurmdbd stopped on the controller: the check names the unit and says the
    associations cannot be read; `railyard up` starts it, and the next check is clean."""
    fault = faults.SLURMDBD_STOPPED
    fault.inject()
    code, doc = _drift(stack, "drift_slurmdbd_stopped_s")
    found = _findings(doc)
    assert code == 2 and doc["errors"] == [], doc
    assert faults.missed(found, [fault]) == [] and faults.unexplained(found, [fault]) == [], \
        "\n".join(f.line for f in found)
    up = _timed("up_slurmdbd_s", lifecycle.up, CLUSTER, work_dir=stack["work"], on_output=stack["log"])
    assert up.summary.result == "succeeded", stack["log"].tail()
    code, doc = _drift(stack, "drift_after_slurmdbd_s")
    assert (code, doc["findings"], doc["errors"]) == (0, [], []), doc
    proc = _podman("exec", faults.container("ctl1"), "sacctmgr", "-nP", "show", "qos", "capped", "format=MaxTRESPU")
    assert proc.stdout.strip() == "gres/gpu=2", proc  # the spec's limit, restored in the batch above


@pytest.mark.timeout(600)  # destroy, and the module's teardown after it
def test_destroy_leaves_nothing(stack: dict) -> None:
    log = stack["log"]
    result = _timed("destroy_s", automation.destroy, CLUSTER, work_dir=stack["work"], on_output=log)
    assert result.summary.result == "succeeded", log.tail()
    assert labelled("container", CLUSTER) == []
    assert labelled("network", CLUSTER) == []
    assert labelled("volume", CLUSTER) == []

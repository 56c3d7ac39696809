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
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import testinfra
import yaml
from ClusterShell.NodeSet import NodeSet

from tests.support import accounting, node_access, pyxis
from tests.support import molecule as support
from tests.support.topology import expected_blocks
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

# How nodes get the configuration, from the spec YAML (the variant's dict) and literals,
# never from the compiler: the lab targets Slurm 24.11 and leaves config_delivery unset,
# and from 24.11 the default is configless (docs/user-guide.md, "How nodes get slurm.conf").
SPEC_SLURM = support.VARIANTS[VARIANT]()["partitions"]["slurm"]
SPEC_VERSION = support.VARIANTS[VARIANT]()["cluster"]["versions"]["slurm"]
DELIVERY = SPEC_SLURM.get("config_delivery") or {"24.11": "configless"}[SPEC_VERSION]
CONF_SERVER = f"{CONTROLLER}:6817"  # the lab's SlurmctldPort
# What slurmd fetches and keeps in /run/slurm/conf (its SlurmdSpoolDir/conf-cache) and
# what sackd keeps there for the login node's commands (Slurm 24.11 fetch_config.c:
# slurmd_config_files, client_config_files; with the includes of plugstack.conf).
SLURMD_FILES = ("slurm.conf", "topology.conf", "gres.conf", "cgroup.conf")
SACKD_FILES = ("slurm.conf", "topology.conf")
# What files mode copies to every node, and prepare.yml left on compute and login nodes.
FILES_MODE_COPIES = (*SLURMD_FILES, "plugstack.conf.d/pyxis.conf")
CACHE = "/run/slurm/conf"
PYXIS_CONF = ARTIFACTS / "slurm/plugstack.conf.d/pyxis.conf"
configless = pytest.mark.skipif(DELIVERY != "configless", reason=f"config_delivery is {DELIVERY}")


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


def _sha(name: str, path: str) -> str | None:
    res = host(name).run(f"sha256sum {shlex.quote(path)}")
    return res.stdout.split()[0] if res.rc == 0 else None


def test_slurm_conf_identical_everywhere():
    """The rendered slurm.conf is what every daemon and command reads: /etc/slurm on the
    controller; in configless mode slurmd's and sackd's cache elsewhere."""
    rendered = hashlib.sha256((ARTIFACTS / "slurm/slurm.conf").read_bytes()).hexdigest()
    where = {n: "/etc/slurm/slurm.conf" if DELIVERY == "files" or n == CONTROLLER else f"{CACHE}/slurm.conf"
             for n in HOSTS}
    sums = {n: _sha(n, path) for n, path in where.items()}
    assert set(sums.values()) == {rendered}, (where, sums)


@configless
@pytest.mark.parametrize("name", [*COMPUTE, LOGIN])
def test_configless_nothing_copied(name):
    """No Slurm file on compute and login nodes: prepare.yml left files-mode copies of all
    of them (which the commands would read before the served ones), converge removed them."""
    left = [f for f in FILES_MODE_COPIES if host(name).file(f"/etc/slurm/{f}").exists]
    assert not left, f"{name}: /etc/slurm still has {left}"


@configless
@pytest.mark.parametrize("name", COMPUTE)
def test_configless_slurmd_fetches_from_the_controller(name):
    """slurmd runs with --conf-server and holds the rendered files slurmctld served, with
    plugstack.conf including pyxis.conf next to it."""
    args = run_ok(name, "ps -o args= -C slurmd", "slurmd")
    assert f"--conf-server {CONF_SERVER}" in args, args
    for f in SLURMD_FILES:
        assert _sha(name, f"{CACHE}/{f}") == hashlib.sha256((ARTIFACTS / "slurm" / f).read_bytes()).hexdigest(), f
    assert _sha(name, f"{CACHE}/pyxis.conf") == hashlib.sha256(PYXIS_CONF.read_bytes()).hexdigest()
    plugstack = run_ok(name, f"cat {CACHE}/plugstack.conf")
    assert [line for line in plugstack.splitlines() if line and not line.startswith("#")] == ["include pyxis.conf"]


@configless
def test_configless_login_runs_sackd():
    """sackd (not slurmd) on the login node, fetching from the controller into /run/slurm/conf."""
    h = host(LOGIN)
    svc = h.service("sackd")
    if not (svc.is_running and svc.is_enabled):
        pytest.fail(f"sackd on {LOGIN}: running={svc.is_running} enabled={svc.is_enabled}{journal(LOGIN, 'sackd')}")
    args = run_ok(LOGIN, "ps -o args= -C sackd", "sackd")
    assert f"--conf-server {CONF_SERVER}" in args, args
    assert h.run("ps -o args= -C slurmd").stdout.strip() == ""
    for f in SACKD_FILES:
        assert _sha(LOGIN, f"{CACHE}/{f}") == hashlib.sha256((ARTIFACTS / "slurm" / f).read_bytes()).hexdigest(), f


def test_srun_on_login_loads_pyxis():
    """The plugstack.conf the login node's srun reads (sackd's cache in configless mode)
    includes pyxis.conf, which loads the plugin: srun lists Pyxis' options."""
    out = run_ok(LOGIN, "srun --help")
    assert "--container-image" in out, out


# Real containers through Pyxis and Enroot on the four compute nodes, with the checks the
# Pulumi lab runs too (tests/support/pyxis.py). Required: a missing image fails them. This
# scenario has no NFS server, so the image is copied to the same path on every compute node
# and the token for --container-mounts is written to each node's own /home; on the lab both
# come from the shared storage.
NODE_IMAGE = "/var/tmp/railyard-images/busybox.sqsh"


@pytest.fixture(scope="module")
def containers() -> pyxis.Cluster:
    assert pyxis.BUILT_IMAGE.is_file(), f"{pyxis.BUILT_IMAGE} is missing: run scripts/build-container-image.sh"
    cluster = pyxis.Cluster(login=LOGIN, compute=COMPUTE, container=lambda node: node, image=NODE_IMAGE)
    for node in COMPUTE:
        run_ok(node, f"mkdir -p {Path(NODE_IMAGE).parent}")
        subprocess.run(["podman", "cp", str(pyxis.BUILT_IMAGE), f"{node}:{NODE_IMAGE}"], check=True, timeout=60)
    return cluster


@pytest.mark.timeout(120)
def test_srun_in_a_container_on_every_compute_node(containers):
    t_container, t_plain = pyxis.runs_on_every_node(containers)
    print(f"srun -N{len(COMPUTE)} in a container: {t_container} s; without: {t_plain} s (podman exec included)")


@pytest.mark.timeout(120)
def test_container_mounts_bring_home_in(containers):
    token = f"railyard-{os.getpid()}-{time.monotonic_ns()}"
    for node in COMPUTE:
        run_ok(node, f"mkdir -p /home/railyard-pyxis && echo {token} > /home/railyard-pyxis/token")
    pyxis.mounts_bring_home_in(containers, token)


@pytest.mark.timeout(120)
def test_named_container_persists_within_a_job_and_is_reused(containers):
    pyxis.named_container_persists_and_is_reused(containers, f"molecule{os.getpid()}")


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


def _blocks(text: str) -> dict[str, tuple[int, frozenset[str]]]:
    """``scontrol show topology`` under topology/block: every block, base and aggregated,
    as name -> (BlockSize, its nodes)."""
    out = {}
    for line in text.splitlines():
        rec = dict(re.findall(r"(\w+)=(\S+)", line))
        name = rec.get("BlockName") or rec.get("AggregatedBlock")
        if name:
            out[name] = (int(rec["BlockSize"]), frozenset(NodeSet(rec["Nodes"])))
    return out


def test_blocks_are_the_nvlink_domains_and_the_sus():
    """topology/block: one base block per NVLink domain with Slurm nodes (each GPU node is
    its own domain here: nvl3 and nvl6 hold only the Kubernetes workers kw1 and kw2, so
    Slurm leaves them out), and the BlockSizes=2 aggregates are exactly the SUs."""
    want = {
        "nvl1": (1, {"gpu001"}), "nvl2": (1, {"gpu002"}), "nvl4": (1, {"gpu003"}), "nvl5": (1, {"gpu004"}),
        "nvl[1-2]": (2, SPEC_SUS["su1"]), "nvl[4-5]": (2, SPEC_SUS["su2"]),
    }
    # the literal is the spec's own derivation (tests/support/topology.py), not the compiler's
    spec = support.VARIANTS[VARIANT]()
    assert {n: (1, nodes) for n, nodes in expected_blocks(spec).items()} == {
        n: v for n, v in want.items() if v[0] == 1
    }
    out = run_ok(LOGIN, "scontrol show topology")
    assert _blocks(out) == want, out
    assert "TopologyPlugin=topology/block" in run_ok(CONTROLLER, "cat /etc/slurm/slurm.conf")
    assert "BlockSizes=1,2" in run_ok(CONTROLLER, "cat /etc/slurm/topology.conf")


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


def _running(job: str) -> dict[str, str]:
    return wait_for(lambda: ((f := _job(job)).get("JobState") == "RUNNING", f), timeout=30, every=0.5)


def test_a_two_node_job_stays_in_one_su_where_segments_of_one_may_cross():
    """BlockSizes=1,2: a 2-node job is larger than one block, so Slurm places it inside one
    2-block aggregate, which is one SU. With the first node of each SU busy, the CONTROL
    `-N2 --segment=1` (two 1-node segments, each in some block) runs at once on the idle
    cross-SU pair, where first fit would put any 2-node job; the plain -N2 job stays pending
    (Reason=Resources) beside that pair, and runs inside su1 once su1's busy node frees."""
    (a1, a2), (b1, b2) = sorted(SPEC_SUS["su1"]), sorted(SPEC_SUS["su2"])
    held = [_sbatch(f"--exclusive -w {n} --wrap 'sleep 300'") for n in (a1, b1)]
    job = None
    try:
        for h in held:
            assert _running(h).get("JobState") == "RUNNING"
        control = _job_done(_sbatch("-N2 --segment=1 --wrap hostname"))
        print(f"\nCONTROL -N2 --segment=1 ({a1}, {b1} busy): ran on {control.get('NodeList')}")
        assert control.get("JobState") == "COMPLETED", control
        assert frozenset(NodeSet(control["NodeList"])) == {a2, b2}, control

        job = _sbatch("-N2 --wrap hostname")
        time.sleep(5)  # the submission and the control's end each ran the scheduler
        pending = _job(job)
        idle = run_ok(LOGIN, f"sinfo -h -N -n {a2},{b2} -o '%N %t'").split()
        print(f"-N2 with {a2},{b2} idle ({idle}): JobState={pending.get('JobState')} Reason={pending.get('Reason')}")
        assert pending.get("JobState") == "PENDING" and pending.get("Reason") == "Resources", pending
        assert set(idle[1::2]) <= {"idle", "plnd"}, idle

        run_ok(LOGIN, f"scancel {held[0]}")
        done = _job_done(job)
        assert done.get("JobState") == "COMPLETED", done
        assert frozenset(NodeSet(done["NodeList"])) == {a1, a2}, f"expected su1 only: {done}"
    finally:
        for j in (*held, job):
            if j:
                host(LOGIN).run(f"scancel {j}")


def test_what_no_block_can_hold_is_refused_with_a_reason():
    """A 2-node job that names one node of each SU fits no 2-block aggregate: sbatch refuses
    it, while the same job inside one SU runs (the control). A segment larger than the base
    block (1 node) is refused too, where --segment=1 is accepted (the test above)."""
    (a1, a2), (b1, _b2) = sorted(SPEC_SUS["su1"]), sorted(SPEC_SUS["su2"])
    across = host(LOGIN).run(f"sbatch --parsable -o /dev/null -N2 -w {a1},{b1} --wrap hostname")
    print(f"\n-N2 -w {a1},{b1}: rc={across.rc} {across.stderr.strip()}")
    assert across.rc != 0 and "Requested node configuration is not available" in across.stderr, across
    inside = _job_done(_sbatch(f"-N2 -w {a1},{a2} --wrap hostname"))
    assert inside.get("JobState") == "COMPLETED", inside
    segment = host(LOGIN).run("sbatch --parsable -o /dev/null -N2 --segment=2 --wrap hostname")
    print(f"-N2 --segment=2: rc={segment.rc} {segment.stderr.strip()}")
    assert segment.rc != 0 and "Requested topology configuration is not available" in segment.stderr, segment


def test_a_job_larger_than_the_largest_block_size_spans_the_sus():
    """Slurm's rule for a job larger than the largest BlockSizes aggregate (2 nodes here):
    it is placed across the whole topology. -N3 takes nodes of both SUs."""
    done = _job_done(_sbatch("-N3 --wrap hostname"))
    assert done.get("JobState") == "COMPLETED", done
    placed = frozenset(NodeSet(done["NodeList"]))
    assert len(placed) == 3 and placed & SPEC_SUS["su1"] and placed & SPEC_SUS["su2"], done


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


def _replace_line(path: str, old: str, new: str) -> None:
    """Replace the line *old* of *path* on the controller by *new* (fixed strings)."""
    script = ("import sys; p, old, new = sys.argv[1:]; lines = open(p).read().split('\\n'); "
              "assert old in lines, (p, old); open(p, 'w').write('\\n'.join(new if x == old else x for x in lines))")
    run_ok(CONTROLLER, f"python3 -c {shlex.quote(script)} {path} {shlex.quote(old)} {shlex.quote(new)}")


@configless
@pytest.mark.timeout(240)
def test_configless_change_reaches_every_node_by_reconfigure():
    """A change to slurm.conf and topology.conf on the controller alone, then `scontrol
    reconfigure`: every slurmd and the login node's sackd fetch it (their caches hold the
    new lines, and a command on a compute node reads it), and nothing is copied to them."""
    # Lines of the variant's rendered files (max_switch_wait 30 min; the blocks variant's
    # BlockSizes=1,2), changed for the length of this test, while no job runs.
    conf, topo = "/etc/slurm/slurm.conf", "/etc/slurm/topology.conf"
    old_conf, new_conf = "SchedulerParameters=max_switch_wait=1800", "SchedulerParameters=max_switch_wait=1799"
    old_topo, new_topo = "BlockSizes=1,2", "BlockSizes=1"
    nodes = [*COMPUTE, LOGIN]
    run_ok(CONTROLLER, f"cp -p {conf} /root/slurm.conf.orig && cp -p {topo} /root/topology.conf.orig")
    t0 = time.monotonic()
    try:
        _replace_line(conf, old_conf, new_conf)
        _replace_line(topo, old_topo, new_topo)
        run_ok(CONTROLLER, "scontrol reconfigure", "slurmctld")

        def arrived():
            seen = {n: (host(n).run(f"grep -cxF -e {shlex.quote(new_conf)} -e {shlex.quote(new_topo)} "
                                    f"{CACHE}/slurm.conf {CACHE}/topology.conf").stdout.split()) for n in nodes}
            return all(v == [f"{CACHE}/slurm.conf:1", f"{CACHE}/topology.conf:1"] for v in seen.values()), seen

        seen = wait_for(arrived, timeout=60, every=0.5)
        took = time.monotonic() - t0
        print(f"\nscontrol reconfigure: the change reached {len(nodes)} nodes' caches in {took:.1f} s")
        assert all(v == [f"{CACHE}/slurm.conf:1", f"{CACHE}/topology.conf:1"] for v in seen.values()), seen
        # a command on a compute node reads the served file (slurmd's cache)
        shown = run_ok(COMPUTE[-1], "scontrol show config")
        assert re.search(r"SchedulerParameters\s*=\s*max_switch_wait=1799", shown), shown
        for n in nodes:
            left = [f for f in FILES_MODE_COPIES if host(n).file(f"/etc/slurm/{f}").exists]
            assert not left, f"{n}: {left} appeared in /etc/slurm"
    finally:
        run_ok(CONTROLLER, f"cp -p /root/slurm.conf.orig {conf} && cp -p /root/topology.conf.orig {topo} "
                           "&& scontrol reconfigure", "slurmctld")
        rendered = hashlib.sha256((ARTIFACTS / "slurm/slurm.conf").read_bytes()).hexdigest()
        wait_for(lambda: (all(_sha(n, f"{CACHE}/slurm.conf") == rendered for n in nodes), None), timeout=60)


# Accounting with real users (tests/support/accounting.py; the Pulumi lab runs the same
# checks and the fair-share order): slurmdbd and MariaDB on the controller, the spec's
# associations applied by the controller's role. No shared /home here: each user's home is
# made on every node. The users, their accounts and the QOS come from the spec's YAML.
@pytest.fixture(scope="module")
def accounts():
    acct = SPEC_SLURM["accounting"]
    cluster = accounting.Cluster(login=LOGIN, nodes=[CONTROLLER, LOGIN, *COMPUTE], container=lambda node: node,
                                 accounting=acct)
    cluster.ensure_users(CONTROLLER)
    for node in COMPUTE:
        for user in cluster.users():
            run_ok(node, f"mkdir -p /home/{user} && chown {user}:{user} /home/{user}")
    return cluster


def test_the_cluster_and_the_specs_associations_are_in_slurmdbd(accounts):
    acct = SPEC_SLURM["accounting"]
    clusters = run_ok(CONTROLLER, "sacctmgr -nP show cluster format=Cluster").split()
    assert clusters == [support.VARIANTS[VARIANT]()["cluster"]["name"]]
    rows = run_ok(CONTROLLER, "sacctmgr -nP show association format=Account,User,ParentName,Fairshare").splitlines()
    got = {(a, u): (p, f) for a, u, p, f in (r.split("|") for r in rows)}
    for a in acct["accounts"]:
        assert got[(a["name"], "")] == (a.get("parent", "root"), str(a.get("fairshare", 1))), rows
    for u in acct["users"]:
        assert (u["default_account"], u["name"]) in got, rows
    qos = run_ok(CONTROLLER, "sacctmgr -nP show qos format=Name,MaxTRESPU").splitlines()
    for q in acct["qos"]:
        want = ",".join(f"{k}={v}" for k, v in sorted(q.get("max_tres_per_user", {}).items()))
        assert f"{q['name']}|{want}" in qos, qos


@pytest.mark.timeout(120)
def test_sacct_records_a_users_job_with_its_gpus(accounts):
    print("sacct:", accounting.sacct_records_gpus(accounts, "alice"))


@pytest.mark.timeout(180)
def test_a_user_over_their_gpu_limit_waits_with_the_qos_reason(accounts):
    got = accounting.gpu_limit_holds_then_frees(accounts, "alice", "bob", "capped")
    print(f"held: JobState={got.get('JobState')} Reason={got.get('Reason')}")


# pam_slurm_adopt (the spec's partitions.slurm.pam_slurm_adopt; tests/support/node_access.py,
# which the Pulumi lab runs too): ssh from the login node with real users and keys.
def _access() -> node_access.Access:
    return node_access.Access(login=LOGIN, compute=[COMPUTE[-1], COMPUTE[-2]], container=lambda node: node,
                              admin_group=SPEC_SLURM["pam_slurm_adopt"]["admin_group"])


@pytest.mark.timeout(150)
def test_ssh_needs_a_job_on_the_node_and_ends_with_it(accounts):
    seen = node_access.no_job_is_refused_a_job_lets_in_and_its_end_ends_the_session(
        _access(), "alice", accounts.sbatch, lambda job: accounts.on_login("scancel", job))
    print("adopted:", json.dumps(seen))


@pytest.mark.timeout(60)
def test_root_and_the_admin_group_ssh_in_without_a_job(accounts):
    node_access.root_and_the_admin_group_get_in_without_a_job(_access(), "carol")


@pytest.mark.timeout(60)
def test_a_job_opens_only_the_gpus_it_was_given(accounts):
    spec = support.VARIANTS[VARIANT]()
    count = next(g["hardware"]["gpus"]["count"] for g in spec["nodes"] if g["group"] == "gpu")
    seen = node_access.a_job_opens_only_its_gpus(_access(), "alice", lambda u, *a: accounts.as_user(u, "srun", *a),
                                                 [f"/dev/nvidia{i}" for i in range(count)])
    print("open() per GPU count:", json.dumps(seen))

"""Accounting checks with real users, one set for the clusters that run them.

The Pulumi lab (tests/deploy/test_lab_stack.py) and molecule/slurm_cluster run these
against real slurmctld, slurmdbd and MariaDB. Users, accounts, QOS and shares come from
the spec's YAML (partitions.slurm.accounting), never from what the compiler rendered.

The users are created here as local Unix users with fixed uids on every Slurm node (a
site has them from its directory service); /home is the shared volume.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
FIRST_UID = 7001


@dataclass(frozen=True)
class Cluster:
    login: str  # the login node's podman container
    nodes: Sequence[str]  # every Slurm node's name (controller, login, compute)
    container: Callable[[str], str]
    accounting: dict[str, Any]  # the spec's partitions.slurm.accounting, as YAML data

    def podman(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], check=False, capture_output=True, text=True, timeout=timeout)

    def on_login(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.login, *argv)

    def as_user(self, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", "--user", user, "--workdir", "/tmp", self.login, *argv)

    def users(self) -> list[str]:
        return [u["name"] for u in self.accounting["users"]]

    def ensure_users(self, controller: str) -> None:
        """Each spec user as a local user, the same uid on every node. slurmctld resolved
        the users' names when it loaded the associations, before they existed here ("User
        7001 not found"); `scontrol reconfigure` has it resolve them again. A site's users
        come from its directory service and resolve from the start."""
        made = False
        for i, user in enumerate(self.users()):
            uid = FIRST_UID + i
            for node in self.nodes:
                proc = self.podman("exec", self.container(node), "sh", "-ec",
                                   f"if id -u {user} >/dev/null 2>&1; then echo kept; else "
                                   f"useradd -M -d /home/{user} -s /bin/bash -u {uid} -U {user}; fi")
                assert proc.returncode == 0, f"useradd {user} on {node}: {proc.stderr}"
                made |= "kept" not in proc.stdout
            self.on_login("sh", "-ec", f"mkdir -p /home/{user} && chown {user}:{user} /home/{user}")
        if made:
            proc = self.podman("exec", self.container(controller), "scontrol", "reconfigure")
            assert proc.returncode == 0, proc.stderr
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                shown = self.podman("exec", self.container(controller), "scontrol", "show", "assoc_mgr",
                                    f"users={','.join(self.users())}", "flags=users").stdout
                if all(f"UserName={u}({FIRST_UID + i})" in shown for i, u in enumerate(self.users())):
                    break
                time.sleep(1)

    def sbatch(self, user: str, *args: str) -> str:
        proc = self.as_user(user, "sbatch", "--parsable", "-o", "/dev/null", *args)
        assert proc.returncode == 0, f"sbatch as {user}: {proc.stderr}"
        return proc.stdout.strip().split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        proc = self.on_login("scontrol", "show", "job", job)
        return dict(re.findall(r"(\w+)=(\S+)", proc.stdout))

    def wait_job(self, job: str, states: set[str], timeout: float = 60) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while (fields := self.job(job)).get("JobState") not in states and time.monotonic() < deadline:
            time.sleep(1)
        return fields

    def scancel(self, *jobs: str | None) -> None:
        ids = [j for j in jobs if j]
        if ids:
            self.on_login("scancel", *ids)


def _account_of(c: Cluster, user: str) -> str:
    return next(u["default_account"] for u in c.accounting["users"] if u["name"] == user)


def sacct_records_gpus(c: Cluster, user: str) -> dict[str, str]:
    """A user's finished 1-GPU job is in sacct with the user, their default account and
    gres/gpu=1 in its TRES; a job without GPUs beside it (the CONTROL) has no gres/gpu."""
    gpu = c.sbatch(user, "-N1", "--gres=gpu:1", "--wrap", "hostname")
    plain = c.sbatch(user, "-N1", "--wrap", "hostname")
    for job in (gpu, plain):
        assert c.wait_job(job, FINISHED).get("JobState") == "COMPLETED", c.job(job)
    fields = ["JobID", "User", "Account", "State", "AllocTRES"]
    rows: dict[str, dict[str, str]] = {}
    deadline = time.monotonic() + 60  # slurmctld sends the job's end to slurmdbd
    while time.monotonic() < deadline:
        proc = c.on_login("sacct", "-X", "-n", "-P", "-j", f"{gpu},{plain}", "-o", ",".join(fields))
        rows = {r["JobID"]: r for r in (dict(zip(fields, ln.split("|"))) for ln in proc.stdout.splitlines() if ln)}
        if all(rows.get(j, {}).get("State") == "COMPLETED" for j in (gpu, plain)):
            break
        time.sleep(2)
    assert set(rows) == {gpu, plain}, rows
    assert rows[gpu]["User"] == user and rows[gpu]["Account"] == _account_of(c, user), rows[gpu]
    assert "gres/gpu=1" in rows[gpu]["AllocTRES"].split(","), rows[gpu]
    assert not any(t.startswith("gres/gpu") for t in rows[plain]["AllocTRES"].split(",")), rows[plain]
    return rows[gpu]


def gpu_limit_holds_then_frees(c: Cluster, user: str, other: str, qos: str) -> dict[str, str]:
    """*qos* caps GPUs per user (max_tres_per_user gres/gpu in the spec). *user* runs the
    cap's worth; their next GPU job waits with a QOS reason though GPUs are free, while
    *other*'s identical job (the CONTROL) runs at once; the held job runs once the first
    ends."""
    spec_qos = next(q for q in c.accounting["qos"] if q["name"] == qos)
    cap = spec_qos["max_tres_per_user"]["gres/gpu"]
    first = held = control = None
    try:
        first = c.sbatch(user, f"--qos={qos}", "-N1", f"--gres=gpu:{cap}", "--wrap", "sleep 300")
        assert c.wait_job(first, {"RUNNING"}, 30).get("JobState") == "RUNNING", c.job(first)
        held = c.sbatch(user, f"--qos={qos}", "-N1", "--gres=gpu:1", "--wrap", "sleep 1")
        control = c.sbatch(other, f"--qos={qos}", "-N1", "--gres=gpu:1", "--wrap", "sleep 1")
        assert c.wait_job(control, FINISHED, 60).get("JobState") == "COMPLETED", c.job(control)
        waiting = c.job(held)
        assert waiting.get("JobState") == "PENDING", waiting
        assert waiting.get("Reason") == "QOSMaxGRESPerUser", waiting
        c.scancel(first)
        done = c.wait_job(held, FINISHED, 90)
        assert done.get("JobState") == "COMPLETED", done
        return waiting
    finally:
        c.scancel(first, held, control)


def sshare(c: Cluster, accounts: Sequence[str]) -> dict[str, dict[str, str]]:
    """sshare's account rows (no users) for *accounts*: RawShares, NormShares, RawUsage, LevelFS..."""
    proc = c.on_login("sshare", "-P", "-l", "-A", ",".join(accounts))
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    head = [h.strip() for h in lines[0].split("|")]
    rows = [dict(zip(head, (v.strip() for v in ln.split("|")))) for ln in lines[1:]]
    return {r["Account"]: r for r in rows if not r.get("User")}


def fair_share_orders_the_queue(c: Cluster, heavy: str, light: str, partition_nodes: int, node_cpus: int,
                                usage_seconds: int = 20) -> dict[str, Any]:
    """Two users whose accounts have shares 3:1 (the spec's fairshare) start from no
    usage (reset, so earlier tests do not count) and use the same amount; then, on a
    partition kept full, *light*'s job (the smaller share) is submitted first and
    *heavy*'s after it. When the partition frees, *heavy*'s job starts first: its
    account's fair-share factor is the higher. Submission order alone (FIFO, the CONTROL
    ordering a scheduler without fair share would follow) would start *light*'s."""
    acct = {u: _account_of(c, u) for u in (heavy, light)}
    shares = {a["name"]: a.get("fairshare", 1) for a in c.accounting["accounts"]}
    assert shares[acct[heavy]] > shares[acct[light]], (acct, shares)
    resets = [["account", "where", f"name={','.join(acct.values())}"],
              *(["user", "where", f"name={u}", f"account={a}"] for u, a in acct.items())]
    for where in resets:
        proc = c.on_login("sacctmgr", "-i", "modify", *where, "set", "RawUsage=0")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # equal usage: the same job, side by side
    use = [c.sbatch(u, "-N1", "--exclusive", "--wrap", f"sleep {usage_seconds}") for u in (heavy, light)]
    for job in use:
        assert c.wait_job(job, FINISHED, usage_seconds + 60).get("JobState") == "COMPLETED", c.job(job)
    # A job's usage reaches RawUsage when it ends (an --exclusive job of usage_seconds on
    # a node of node_cpus is billed about their product), but the normalized usage Fair
    # Tree ranks by (EffectvUsage, LevelFS) only at the decay thread's next pass, every
    # PriorityCalcPeriod. Until then both accounts still look unused (LevelFS inf, seen in
    # CI), their factors are equal and FIFO decides: wait for that pass.
    calc = c.accounting.get("priority", {}).get("calc_period", 5)
    deadline = time.monotonic() + calc * 60 * 2 + 30
    whole = 0.8 * usage_seconds * node_cpus
    while True:
        share = sshare(c, list(acct.values()))
        if all(float(share.get(a, {}).get("RawUsage") or 0) >= whole
               and float(share.get(a, {}).get("EffectvUsage") or 0) > 0 for a in acct.values()):
            break
        assert time.monotonic() < deadline, f"the usage of both jobs ({whole:.0f} each) is not in: {share}"
        time.sleep(3)
    filler = first = second = None
    try:
        filler = c.sbatch("root", "-N", str(partition_nodes), "--exclusive", "--wrap", "sleep 300")
        assert c.wait_job(filler, {"RUNNING"}, 30).get("JobState") == "RUNNING", c.job(filler)
        first = c.sbatch(light, "-N", str(partition_nodes), "--exclusive", "--wrap", "sleep 30")
        time.sleep(2)
        # as long as the first: a job that ends within a second lets *light*'s start before
        # the check below reads it (seen in CI: right order, then both had run)
        second = c.sbatch(heavy, "-N", str(partition_nodes), "--exclusive", "--wrap", "sleep 30")
        for job in (first, second):
            assert c.wait_job(job, {"PENDING"}, 10).get("JobState") == "PENDING", c.job(job)
        priority = {light: c.job(first).get("Priority"), heavy: c.job(second).get("Priority")}
        c.scancel(filler)
        started = c.wait_job(second, {"RUNNING", *FINISHED}, 60)
        light_then = c.job(first)
        why = f"priorities {priority}; {share}"
        assert started.get("JobState") in {"RUNNING", "COMPLETED"}, (started, why)
        assert light_then.get("JobState") == "PENDING", (light_then, why)
        return {"level_fs": {a: share[a].get("LevelFS") for a in acct.values()}, "priority": priority,
                "first_submitted": light, "first_started": heavy}
    finally:
        c.scancel(filler, first, second)

"""Who may ssh to a compute node, on a live cluster (the Pulumi lab, molecule's cluster).

The spec's partitions.slurm.pam_slurm_adopt puts pam_slurm_adopt in sshd's PAM stack
(roles/slurm_compute/tasks/access.yml). The checks use real users and keys, from the login
node, as a user does:

* a user with no job on a node is refused there, with Slurm's own message;
* with a job on a node the same user gets in, and the session runs in the job's extern step
  (its cgroup), beside a control: on another node, where the job is not, they are refused;
* when the job ends, a session still open there ends with it;
* root and a member of the spec's admin group get in without a job.

Nodes are reached with ``podman exec`` (``container(node)`` names a node's container). Each
user's key is made on the login node and authorized on every compute node it is used on, so
that this also holds where /home is not shared (molecule).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# pam_slurm_adopt's message to a user without a job on the node (its send_user_msg, Slurm 24.11)
DENIED = "Access denied by pam_slurm_adopt: you have no active jobs on this node"
# not LogLevel=ERROR: ssh shows pam_slurm_adopt's message at its default level (INFO)
SSH = ("ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
       "-o", "ConnectTimeout=10")
ADMIN_UID = 7900  # the admin group's member, made here; a site's come from its directory


@dataclass
class Access:
    login: str  # the login node
    compute: Sequence[str]  # compute nodes the checks use (two at least)
    container: Callable[[str], str]
    admin_group: str  # the spec's partitions.slurm.pam_slurm_adopt.admin_group

    def podman(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], check=False, capture_output=True, text=True, timeout=timeout)

    def on(self, node: str, script: str, user: str = "root") -> subprocess.CompletedProcess[str]:
        return self.podman("exec", "--user", user, "--workdir", "/tmp", self.container(node), "sh", "-ec", script)

    def ok(self, node: str, script: str, user: str = "root") -> str:
        proc = self.on(node, script, user)
        assert proc.returncode == 0, f"{node} as {user}: {script}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def ssh(self, user: str, node: str, command: str) -> subprocess.CompletedProcess[str]:
        """``ssh NODE COMMAND`` as *user* from the login node."""
        return self.on(self.login, shlex.join([*SSH, node, command]), user)

    def authorize(self, user: str, home: str) -> None:
        """A key for *user* on the login node, authorized on the compute nodes."""
        pub = self.ok(self.login, f"mkdir -p -m 700 {home}/.ssh && cd {home}/.ssh && "
                                  "{ [ -f id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f id_ed25519; } && "
                                  "cat id_ed25519.pub", user).strip()
        assert pub.startswith("ssh-ed25519 "), pub
        for node in self.compute:
            self.ok(node, f"mkdir -p {home}/.ssh && grep -qxF {shlex.quote(pub)} {home}/.ssh/authorized_keys "
                          f"2>/dev/null || echo {shlex.quote(pub)} >> {home}/.ssh/authorized_keys; "
                          f"chown -R {user}: {home}/.ssh && chmod 700 {home}/.ssh && "
                          f"chmod 600 {home}/.ssh/authorized_keys")

    def ensure_admin(self, name: str) -> None:
        """A member of the admin group, the same uid on the login and compute nodes."""
        for node in (self.login, *self.compute):
            self.ok(node, f"getent group {self.admin_group} >/dev/null || groupadd {self.admin_group}; "
                          f"id -u {name} >/dev/null 2>&1 || useradd -m -u {ADMIN_UID} -G {self.admin_group} "
                          f"-s /bin/bash {name}")


def no_job_is_refused_a_job_lets_in_and_its_end_ends_the_session(
        a: Access, user: str, sbatch: Callable[..., str], cancel: Callable[[str], None],
        timeout: float = 60) -> dict[str, object]:
    """*user* (with no job running anywhere) is refused on both nodes; a job on the first
    lets them in there, into its extern step, and not on the second; an ssh session left
    running there ends when the job is cancelled. ``sbatch(user, *args)`` submits and
    returns the job id. Returns what was seen, for the test's log."""
    there, elsewhere = a.compute[0], a.compute[1]
    a.authorize(user, f"/home/{user}")
    for node in (there, elsewhere):
        refused = a.ssh(user, node, "true")
        assert refused.returncode == 255 and DENIED in refused.stderr, (node, refused.stderr)
    job = sbatch(user, "-w", there, "-N1", "--wrap", "sleep 600")
    seen: dict[str, object] = {"job": job}
    try:
        deadline = time.monotonic() + timeout
        while (inside := a.ssh(user, there, "cat /proc/self/cgroup")).returncode != 0:
            assert DENIED in inside.stderr, inside.stderr  # refused until the job runs there
            assert time.monotonic() < deadline, f"job {job} did not start on {there} within {timeout} s"
            time.sleep(1)
        # controller -> the session's cgroup, from the job's step down (cgroup v1 here)
        steps = {ctrl: path[path.find("/job_"):] for _, ctrl, path in
                 (line.split(":", 2) for line in inside.stdout.splitlines())
                 if ctrl in ("freezer", "memory", "devices", "cpuset")}
        seen["cgroups"] = steps
        assert len(steps) == 4 and all(p.startswith(f"/job_{job}/step_extern") for p in steps.values()), inside.stdout
        control = a.ssh(user, elsewhere, "true")
        assert control.returncode == 255 and DENIED in control.stderr, control.stderr
        # a session left open on the job's node, then the job's end
        a.podman("exec", "-d", "--user", user, "--workdir", "/tmp", a.container(a.login),
                 *SSH, there, "exec sleep 86400")
        marker = "sleep 86400"
        deadline = time.monotonic() + 20
        while a.on(there, f"pgrep -u {user} -fx '{marker}'").returncode != 0:
            assert time.monotonic() < deadline, f"the ssh session's sleep never started on {there}"
            time.sleep(0.5)
    finally:
        cancel(job)
    t0 = time.monotonic()
    while a.on(there, f"pgrep -u {user} -fx 'sleep 86400'").returncode == 0:
        assert time.monotonic() - t0 < timeout, f"the ssh session on {there} outlived job {job}"
        time.sleep(0.5)
    seen["session_ended_after_s"] = round(time.monotonic() - t0, 1)
    while a.on(a.login, f"pgrep -u {user} -f '{there} exec sleep 86400'").returncode == 0:
        assert time.monotonic() - t0 < timeout, f"ssh to {there} still open on {a.login} after job {job} ended"
        time.sleep(0.5)
    # refused again once the job's step daemons are gone (a completing job still adopts)
    while DENIED not in (refused := a.ssh(user, there, "true")).stderr:
        assert time.monotonic() - t0 < timeout, f"still let in on {there} after job {job}: {refused}"
        time.sleep(1)
    seen["refused_again_after_s"] = round(time.monotonic() - t0, 1)
    return seen


def root_and_the_admin_group_get_in_without_a_job(a: Access, admin: str) -> None:
    a.ensure_admin(admin)
    a.authorize(admin, f"/home/{admin}")
    a.authorize("root", "/root")
    for user in ("root", admin):
        for node in a.compute[:2]:
            proc = a.ssh(user, node, "id -un")
            assert proc.returncode == 0 and proc.stdout.strip() == user, (user, node, proc.stderr)


def a_job_opens_only_its_gpus(a: Access, user: str, srun: Callable[..., subprocess.CompletedProcess[str]],
                              devices: Sequence[str]) -> dict[int, list[str]]:
    """ConstrainDevices, with the stand-in GPUs (character devices 195:N, no driver behind
    them): a job opens the devices it was given (the open reaches the missing driver: "No such
    device or address") and is refused the others ("Operation not permitted"). Per GPU count
    asked for, the errors seen, one per device."""
    seen: dict[int, list[str]] = {}
    script = "; ".join(f"head -c1 {d} 2>&1 >/dev/null | sed 's/.*: //'" for d in devices)
    for count in range(len(devices) + 1):
        gres = [f"--gres=gpu:{count}"] if count else []
        proc = srun(user, "-w", a.compute[0], "-N1", *gres, "sh", "-c", script)
        assert proc.returncode == 0, proc.stderr
        seen[count] = proc.stdout.strip().splitlines()
        assert sorted(seen[count]) == sorted(["No such device or address"] * count
                                             + ["Operation not permitted"] * (len(devices) - count)), seen
    return seen

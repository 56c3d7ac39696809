"""Drift injected by hand into the lab cluster, and what the drift check must say about it.

Each :class:`Fault` is one kind of drift an operator meets: a command run in one node
container (or on the host), the findings that must follow, and the findings it may
cause on the way (a stopped slurmd becomes a not-responding node once slurmctld's ping
notices). The end-to-end test injects them in one batch, runs one drift check, lets
``railyard up`` remediate, and checks again (tests/deploy/test_lab_stack.py).

The faults touch different files on different nodes, so none hides another; the one
that restarts slurmctld runs first, before topology.conf is edited, so the controller's
live topology stays the plan's and only the file differs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from railyard.drift.model import Finding

CLUSTER = "lab"


def container(node: str) -> str:
    return f"railyard-{CLUSTER}-{node}"


def sh(node: str, script: str) -> None:
    """Run ``script`` in the node's container; a failed injection fails the test right there."""
    proc = subprocess.run(["podman", "exec", container(node), "sh", "-ec", script],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"injecting on {node} failed ({proc.returncode}): {script}\n{proc.stderr}")


@dataclass(frozen=True)
class Want:
    """A finding that must be there: its layer, subject and kind, and text its message holds."""

    layer: str
    subject: str
    kind: str
    text: str = ""

    def matches(self, f: Finding) -> bool:
        return (f.layer, f.subject, f.kind) == (self.layer, self.subject, self.kind) and self.text in f.message


@dataclass(frozen=True)
class Fault:
    name: str
    node: str
    script: str  # run in the node's container; "" for faults made from the host
    wants: tuple[Want, ...]
    may: tuple[Want, ...] = ()  # side effects that may show, depending on timing
    remediated_by_up: bool = True
    host_cmd: tuple[str, ...] = ()  # run on the host instead, e.g. to delete a container

    def inject(self) -> None:
        if self.host_cmd:
            subprocess.run(self.host_cmd, capture_output=True, text=True, timeout=120, check=True)
        if self.script:
            sh(self.node, self.script)


def _files(node: str, kind: str, text: str) -> Want:
    return Want("files", node, kind, text)


SLURM_CONF = "/etc/slurm/slurm.conf"

# In injection order. gpu099 first: it restarts slurmctld, which must not load the
# topology.conf edit that follows.
FAULTS: tuple[Fault, ...] = (
    Fault(
        "node registered in Slurm that the spec does not have", "ctl1",
        f"echo 'NodeName=gpu099 NodeAddr=10.77.0.199 CPUs=2 RealMemory=1000 State=UNKNOWN' >> {SLURM_CONF}\n"
        "systemctl restart slurmctld\n"
        "for i in $(seq 60); do scontrol ping >/dev/null 2>&1 && exit 0; sleep 1; done; exit 1",
        (Want("slurm", "gpu099", "node_unexpected", "registered in Slurm but not in the spec"),
         _files("ctl1", "file_changed", f"ctl1: {SLURM_CONF} differs from the plan (1 extra line)"),
         # the role's own plan for it: a node set change takes a restart, not a reconfigure
         _files("ctl1", "task_changed", "the change needs a slurmctld restart")),
        # every slurmd now runs with another slurm.conf than slurmctld's
        may=(Want("slurm", "gpu001", "node_state"), Want("slurm", "gpu002", "node_state"),
             Want("slurm", "gpu004", "node_state")),
    ),
    Fault(
        "slurm.conf edited on one compute node", "gpu001",
        f"sed -i 's/^MpiDefault=none$/MpiDefault=pmi2/' {SLURM_CONF}; grep -q '^MpiDefault=pmi2$' {SLURM_CONF}",
        (_files("gpu001", "file_changed", f"gpu001: {SLURM_CONF} differs from the plan (1 plan line missing, 1 extra)"),),
    ),
    Fault(
        "topology.conf changed on the controller", "ctl1",
        "echo 'SwitchName=rogue Nodes=gpu001' >> /etc/slurm/topology.conf",
        (_files("ctl1", "file_changed", "ctl1: /etc/slurm/topology.conf differs from the plan (1 extra line)"),),
    ),
    Fault(
        "slurmd stopped", "gpu002", "systemctl stop slurmd",
        (Want("nodes", "gpu002", "unit_inactive", "slurmd.service is inactive"),
         _files("gpu002", "service", "service slurmd is inactive")),
        # UNKNOWN when slurmctld restarted before it (the first fault), NOT_RESPONDING
        # once slurmctld's ping notices
        may=(Want("slurm", "gpu002", "node_state"),),
    ),
    Fault(
        "node drained", "ctl1", "scontrol update nodename=gpu003 state=drain reason=railyard-fault-injection",
        (Want("slurm", "gpu003", "node_state", "reason: 'railyard-fault-injection'"),),
        # an operator's drain is a decision, not drift to undo: `railyard up` reports it and leaves it
        remediated_by_up=False,
    ),
    Fault(
        "munge key replaced on one node", "gpu004",
        "head -c 1024 /dev/urandom > /etc/munge/munge.key.new\n"
        "chown munge:munge /etc/munge/munge.key.new; chmod 0400 /etc/munge/munge.key.new\n"
        "mv /etc/munge/munge.key.new /etc/munge/munge.key",
        (_files("gpu004", "secret_changed", "role munge would change a secret"),),
    ),
    Fault(
        "pyxis.conf removed", "login1", "rm /etc/slurm/plugstack.conf.d/pyxis.conf.inactive",
        (_files("login1", "file_missing", "login1: /etc/slurm/plugstack.conf.d/pyxis.conf.inactive is missing"),),
    ),
    Fault(
        "NFS export changed", "nfs1",
        "sed -i 's/Access_Type = RW;/Access_Type = RO;/' /etc/ganesha/ganesha.conf\n"
        "grep -q 'Access_Type = RO;' /etc/ganesha/ganesha.conf",
        (_files("nfs1", "file_changed", "nfs1: /etc/ganesha/ganesha.conf differs from the plan (1 plan line missing, 1 extra)"),),
    ),
    Fault(
        "mount unit removed", "login1", "rm /etc/systemd/system/shared.mount; systemctl daemon-reload",
        (_files("login1", "file_missing", "login1: /etc/systemd/system/shared.mount is missing"),
         Want("nodes", "login1", "unit_missing", "login1: shared.mount does not exist, the plan has it enabled")),
    ),
    Fault(
        "enroot.conf edited", "gpu003",
        "sed -i 's|^ENROOT_RUNTIME_PATH .*|ENROOT_RUNTIME_PATH /tmp/rogue|' /etc/enroot/enroot.conf\n"
        "grep -q '^ENROOT_RUNTIME_PATH /tmp/rogue$' /etc/enroot/enroot.conf",
        (_files("gpu003", "file_changed", "gpu003: /etc/enroot/enroot.conf differs from the plan (1 plan line missing, 1 extra)"),),
    ),
    Fault(
        # inside railyard's block (lines outside it are the operator's); podman bind-mounts
        # /etc/hosts, so it is rewritten in place, not renamed over
        "hosts entry changed", "nfs1",
        "sed 's/^10.77.0.10 ctl1[.]/10.77.0.210 ctl1./' /etc/hosts > /tmp/hosts; cat /tmp/hosts > /etc/hosts\n"
        "grep -q '^10.77.0.210 ctl1[.]' /etc/hosts",
        (_files("nfs1", "file_changed", "nfs1: /etc/hosts differs from the plan (1 plan line missing, 1 extra)"),),
    ),
    Fault(
        "Kueue manager stopped", "kcp1", "systemctl stop kueue",
        (Want("nodes", "kcp1", "unit_inactive", "kueue.service is inactive"),
         _files("kcp1", "service", "service kueue is inactive")),
    ),
    Fault(
        "node container deleted", "kw1", "",
        (Want("nodes", "kw1", "missing", "kw1: container railyard-lab-kw1 does not exist"),),
        may=(Want("files", "kw1", "unreachable"),),
        host_cmd=("podman", "rm", "--force", container("kw1")),
    ),
)


def unexplained(findings: Iterable[Finding], faults: Iterable[Fault]) -> list[Finding]:
    """Findings no fault asks for or allows: false alarms."""
    known = [w for f in faults for w in (*f.wants, *f.may)]
    return [f for f in findings if not any(w.matches(f) for w in known)]


def missed(findings: Iterable[Finding], faults: Iterable[Fault]) -> list[tuple[str, Want]]:
    """(fault, wanted finding) pairs the check did not report."""
    found = list(findings)
    return [(fault.name, w) for fault in faults for w in fault.wants if not any(w.matches(f) for f in found)]

"""Drift injected by hand into the lab cluster, and what the drift check must say about it.

Each :class:`Fault` is one kind of drift an operator meets: a command run in one node
container (or on the host), the findings that must follow, and the findings it may
cause on the way (a stopped slurmd becomes a not-responding node once slurmctld's ping
notices). The end-to-end test injects them in one batch, runs one drift check, lets
``railyard up`` remediate, and checks again (tests/deploy/test_lab_stack.py).

The faults touch different files, units and API objects, so none hides another's
finding; the one that restarts slurmctld runs first, before topology.conf is edited, so
the controller's live topology stays the plan's and only the file differs. One view is
shared on purpose: with the Kueue manager stopped, the kueue role's check cannot dry-run
kueue.yaml (its webhooks refuse), so the edited ClusterQueue is seen by the kubernetes
layer only, and the kueue role that the stopped manager re-runs restores both. Without
the Kueue stop (checked by hand on a CLI lab), every Kubernetes fault is found by its
role's check too, and `railyard up` re-runs that role for it.
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
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"  # on the control plane, as roles/k8s_control_plane writes it
SU_LABEL = "topology.railyard.dev/su"

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
        # The lab is configless (Slurm 24.11's default): slurmd fetches from slurmctld and the
        # role removes every local copy, since the node's commands would read this one first.
        "stale slurm.conf left on one compute node", "gpu001",
        f"sed 's/^MpiDefault=pmix$/MpiDefault=pmi2/' /run/slurm/conf/slurm.conf > {SLURM_CONF}\n"
        f"grep -q '^MpiDefault=pmi2$' {SLURM_CONF}",
        (_files("gpu001", "file_unexpected", f"gpu001: {SLURM_CONF} should not exist (the plan removes it)"),),
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
        # anyone could then ssh to gpu001 and use the GPUs another user's job holds
        "pam_slurm_adopt taken out of sshd's PAM stack", "gpu001",
        "sed -i '/pam_slurm_adopt.so/d' /etc/pam.d/sshd",
        (_files("gpu001", "file_changed", "gpu001: /etc/pam.d/sshd differs from the plan (1 plan line missing)"),),
    ),
    Fault(
        "munge key replaced on one node", "gpu004",
        "head -c 1024 /dev/urandom > /etc/munge/munge.key.new\n"
        "chown munge:munge /etc/munge/munge.key.new; chmod 0400 /etc/munge/munge.key.new\n"
        "mv /etc/munge/munge.key.new /etc/munge/munge.key",
        (_files("gpu004", "secret_changed", "role munge would change a secret"),),
    ),
    Fault(
        # srun, sbatch and sinfo read /etc/slurm/slurm.conf before sackd's cache
        # (/run/slurm/conf), so a stale copy there is felt by the next user command; the
        # e2e's last srun from login1 proves `railyard up` removed it
        "stale slurm.conf with another controller port on the login node", "login1",
        f"sed 's/^SlurmctldPort=6817$/SlurmctldPort=6899/' /run/slurm/conf/slurm.conf > {SLURM_CONF}\n"
        f"grep -q '^SlurmctldPort=6899$' {SLURM_CONF}\n"
        # felt: the login node's commands no longer reach slurmctld
        "if timeout 60 sinfo -h >/dev/null 2>&1; then echo 'sinfo still reaches slurmctld' >&2; exit 1; fi",
        (_files("login1", "file_unexpected", f"login1: {SLURM_CONF} should not exist (the plan removes it)"),),
    ),
    # Accounting, edited with sacctmgr as an operator would: the controller's role reads
    # slurmdbd's associations and shows every line that differs from the spec.
    Fault(
        "QOS limit edited by hand", "ctl1",
        "sacctmgr -i modify qos where name=capped set MaxTRESPerUser=gres/gpu=8\n"
        "sacctmgr -nP show qos capped format=MaxTRESPU | grep -qx 'gres/gpu=8'",
        (_files("ctl1", "file_changed", "ctl1: slurmdbd associations of cluster lab differs from the plan"),),
    ),
    Fault(
        "account added by hand", "ctl1",
        "sacctmgr -i add account rogue cluster=lab\n"
        "sacctmgr -nP show account rogue format=Account | grep -qx rogue",
        (_files("ctl1", "file_changed", "ctl1: slurmdbd associations of cluster lab differs from the plan"),),
    ),
    Fault(
        "NFS export changed", "nfs1",
        # the first export only (the lab exports /export/shared and /export/home)
        "sed -i '0,/Access_Type = RW;/s//Access_Type = RO;/' /etc/ganesha/ganesha.conf\n"
        "grep -q 'Access_Type = RO;' /etc/ganesha/ganesha.conf",
        (_files("nfs1", "file_changed", "nfs1: /etc/ganesha/ganesha.conf differs from the plan (1 plan line missing, 1 extra)"),),
    ),
    Fault(
        "mount unit removed", "login1", "rm /etc/systemd/system/shared.mount; systemctl daemon-reload",
        (_files("login1", "file_missing", "login1: /etc/systemd/system/shared.mount is missing"),
         # The lab's stand-in for the NFS mount (the server's volume at /shared) stays
         # mounted, so systemd still has a shared.mount, from the mount table, not enabled.
         Want("nodes", "login1", "unit_disabled", "login1: shared.mount is not enabled at boot, the plan has it enabled")),
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
    # The Kubernetes faults. The ClusterQueue edit comes before the Kueue manager stops:
    # Kueue's webhooks refuse every ClusterQueue write while it is down.
    Fault(
        "fabric label removed from a worker", "kcp1",
        f"{KUBECTL} label node kw2 {SU_LABEL}-\n"
        f"test -z \"$({KUBECTL} get node kw2 -o jsonpath='{{.metadata.labels.topology\\.railyard\\.dev/su}}')\"",
        (Want("kubernetes", "kw2", "label_missing", f"kw2: label {SU_LABEL} is missing (the plan has 'su2')"),
         # k8s_worker applies the Node's labels from the control plane (its node.yml)
         _files("kw2", "object_changed", "kw2: Node/kw2 on the apiserver differs from the plan")),
    ),
    Fault(
        "ClusterQueue quota edited by hand", "kcp1",
        # the JSON patch's test op makes sure it is the GPU quota that changes
        f"{KUBECTL} patch clusterqueue gpu --type=json -p '["
        '{"op": "test", "path": "/spec/resourceGroups/0/flavors/0/resources/2/name", "value": "nvidia.com/gpu"}, '
        '{"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota", "value": "8"}'
        "]'",
        (Want("kubernetes", "ClusterQueue/gpu", "object_field",
              "ClusterQueue/gpu: spec.resourceGroups[0].flavors[0].resources[2].nominalQuota is '8' in the cluster, "
              "the plan has '4'"),),
        # kueue's check-mode diff of kueue.yaml; not while the manager is down (the fault
        # below): its webhooks would refuse the dry run. The stopped manager re-runs the
        # kueue role on kcp1 as well, which re-applies kueue.yaml either way.
        may=(_files("kcp1", "object_changed", "kcp1: ClusterQueue/gpu on the apiserver differs from the plan"),),
    ),
    Fault(
        "HyperNode deleted", "kcp1", f"{KUBECTL} delete hypernodes.topology.volcano.sh su2",
        (Want("kubernetes", "HyperNode/su2", "object_missing", "HyperNode/su2 is in the plan but not in the cluster"),
         _files("kcp1", "object_missing", "kcp1: HyperNode/su2 is missing from the apiserver")),
    ),
    Fault(
        # kw1's block of the lab's pod network (the default 10.244.0.0/16 in /24s, kw1 first):
        # kw2's pods can no longer reach kw1's. The unit that put it there is still active.
        "a pod route deleted on a worker", "kw2",
        "ip route del 10.244.0.0/24\n! ip route show 10.244.0.0/24 | grep -q .",
        (_files("kw2", "task_changed", "Read the routes to the other workers' pods"),),
    ),
    Fault(
        "kubelet stopped on a worker", "kw2", "systemctl stop kubelet",
        (Want("nodes", "kw2", "unit_inactive", "kubelet.service is inactive"),
         _files("kw2", "service", "service kubelet is inactive")),
        # with kw1 gone too, CoreDNS's two replicas (one on each worker) may both be unready
        # by the time of the check (the Node controller marks kw2's pods once its heartbeat is late)
        may=(Want("kubernetes", "kube-system/coredns", "dns_unavailable"),),
    ),
    Fault(
        # after the kubelet stopped: a running kubelet leaves extended resources alone, but
        # nothing here should depend on that. Kueue and kube-scheduler now see no GPUs on kw2.
        "a worker's GPUs zeroed in its Node status", "kcp1",
        f"{KUBECTL} patch node kw2 --subresource=status --type=merge "
        """-p '{"status": {"capacity": {"nvidia.com/gpu": "0"}, "allocatable": {"nvidia.com/gpu": "0"}}}'\n"""
        f"test \"$({KUBECTL} get node kw2 -o jsonpath='{{.status.capacity.nvidia\\.com/gpu}}')\" = 0",
        (Want("kubernetes", "kw2", "capacity_value", "kw2: capacity nvidia.com/gpu is 0, the plan has 2"),
         Want("kubernetes", "kw2", "capacity_value", "kw2: allocatable nvidia.com/gpu is 0, the plan has 2")),
        # k8s_worker's read of the Node's capacity (node.yml) on the control plane; kw2's
        # pair runs in check mode anyway (its kubelet is stopped)
        may=(Want("files", "kw2", "task_changed", "Read the Node's capacity"),
             Want("files", "kcp1", "task_changed", "Read the Node's capacity")),
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


# Found by itself (tests/deploy/test_lab_stack.py): with slurmdbd down, the associations
# the faults above edit cannot be read.
SLURMDBD_STOPPED = Fault(
    "slurmdbd stopped", "ctl1", "systemctl stop slurmdbd",
    (Want("nodes", "ctl1", "unit_inactive", "slurmdbd.service is inactive"),
     _files("ctl1", "service", "service slurmdbd is inactive"),
     _files("ctl1", "task_changed", "slurmdbd does not answer")),
)


def unexplained(findings: Iterable[Finding], faults: Iterable[Fault]) -> list[Finding]:
    """Findings no fault asks for or allows: false alarms."""
    known = [w for f in faults for w in (*f.wants, *f.may)]
    return [f for f in findings if not any(w.matches(f) for w in known)]


def missed(findings: Iterable[Finding], faults: Iterable[Fault]) -> list[tuple[str, Want]]:
    """(fault, wanted finding) pairs the check did not report."""
    found = list(findings)
    return [(fault.name, w) for fault in faults for w in fault.wants if not any(w.matches(f) for f in found)]

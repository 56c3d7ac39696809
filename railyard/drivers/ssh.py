"""Pre-provisioned hosts: someone else racked and installed them; we check they answer.

``ensure_up`` creates nothing: it fails, saying so, when the host does not answer.
``ensure_absent`` leaves the host alone (railyard never wipes a machine it did not make).
"""

from __future__ import annotations

import shlex
import subprocess

from railyard.drivers.base import DriverError, Log, NodeState, SshNode, quiet

CONNECT_TIMEOUT = 10
# One round trip for the facts Ansible and drift care about. machine-id identifies this
# installation: a reinstalled host is a new node that needs its roles again.
FACTS_SCRIPT = "cat /etc/machine-id; uname -r; . /etc/os-release && echo $ID $VERSION_ID; nproc"


def ssh_command(node: SshNode, remote: str) -> list[str]:
    return [
        "ssh",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
        "-o", "StrictHostKeyChecking=accept-new",
        "-p", str(node.port),
        f"{node.user}@{node.address}",
        remote,
    ]


def parse_facts(stdout: str) -> dict[str, str]:
    lines = stdout.strip().splitlines()
    keys = ("machine_id", "kernel", "os", "cpus")
    return {k: v.strip() for k, v in zip(keys, lines)}


class SshDriver:
    def _run(self, node: SshNode, remote: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(ssh_command(node, remote), capture_output=True, text=True,
                                  timeout=CONNECT_TIMEOUT + 20, check=False)
        except FileNotFoundError:
            raise DriverError("no ssh client: apt-get install openssh-client") from None
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([], 255, "", "timed out")

    def observe(self, node: SshNode) -> NodeState:
        proc = self._run(node, "sh -c " + shlex.quote(FACTS_SCRIPT))
        if proc.returncode != 0:
            # An unreachable host may well exist: we cannot tell, so we do not say it is gone.
            return NodeState(exists=True, power="unknown", reachable=False,
                             detail=f"ssh: {proc.stderr.strip()[-200:]}")
        facts = parse_facts(proc.stdout)
        return NodeState(exists=True, power="on", reachable=True, detail="ssh ok",
                         instance=facts.get("machine_id", ""), facts=facts)

    def ensure_up(self, node: SshNode, log: Log = quiet) -> NodeState:
        state = self.observe(node)
        if not state.reachable:
            raise DriverError(
                f"{node.name}: not reachable over ssh as {node.user}@{node.address} ({state.detail}). "
                "The ssh driver does not create hosts: install and boot it, and authorize this "
                "machine's key, or use the redfish driver"
            )
        log(f"{node.name}: ssh ok ({state.facts.get('os', '?')}, kernel {state.facts.get('kernel', '?')})")
        return state

    def ensure_absent(self, node: SshNode, log: Log = quiet) -> None:
        log(f"{node.name}: ssh driver leaves pre-provisioned hosts as they are")

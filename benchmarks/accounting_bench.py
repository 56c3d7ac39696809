"""Time the association apply of a large spec against a live slurmdbd.

    .venv/bin/python benchmarks/accounting_bench.py --node railyard-lab-ctl1
    .venv/bin/python benchmarks/accounting_bench.py --node ctl1 --accounts 50 --users 500

The node is a running Slurm controller container with slurmdbd (the lab's ctl1, or
molecule's ctl1 after `molecule converge` of roles/slurm_controller). The spec is the lab's
with its accounting replaced by a generated one: --accounts accounts in a tree of depth 2
(a tenth of them top-level, the rest under them, shares 1-4), --users users spread over
them with a default account each, every fifth with a second account. It is rendered by
railyard and applied by the controller role's own module (slurm_associations) through
ansible, three times: the first apply, the second (must change nothing), and check mode.
Then the lab spec's own associations are applied again, so the node is left as the spec
has it. Prints the wall times and the sacctmgr command counts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from railyard.load import loads_plan
from railyard.render import render

LAB = ROOT / "inventories" / "lab" / "cluster.yaml"
BIN = Path(sys.executable).parent


def accounting(accounts: int, users: int) -> dict:
    lab = yaml.safe_load(LAB.read_text())
    acct = lab["partitions"]["slurm"]["accounting"]
    top = max(1, accounts // 10)
    names = [f"acct{i:03}" for i in range(accounts)]
    acct["accounts"] = [{"name": n, "fairshare": 1 + i % 4, **({"parent": names[i % top]} if i >= top else {})}
                        for i, n in enumerate(names)]
    acct["users"] = [{"name": f"user{i:04}", "default_account": names[i % accounts],
                      **({"accounts": [names[(i + 1) % accounts]]} if i % 5 == 0 else {})} for i in range(users)]
    return lab


def associations(spec: dict) -> dict:
    return json.loads(render(loads_plan(yaml.safe_dump(spec), "bench.yaml"))["accounting/associations.json"])


def apply(node: str, state: dict, check: bool = False) -> tuple[float, int, bool]:
    """(seconds, sacctmgr commands, changed) of one run of the module through ansible."""
    with tempfile.TemporaryDirectory(prefix="railyard-acct-bench-") as tmp:
        (Path(tmp) / "state.json").write_text(json.dumps(state))
        (Path(tmp) / "play.yml").write_text(yaml.safe_dump([{
            "hosts": "all", "gather_facts": False,
            "tasks": [{"slurm_associations": {"state": "{{ lookup('file', 'state.json') | from_json }}"}}]}]))
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", f"{node},", "-c", "containers.podman.podman",
             "-M", str(ROOT / "roles/slurm_controller/library"), *(["--check"] if check else []), "play.yml"],
            cwd=tmp, capture_output=True, text=True, timeout=1800, check=False,
            env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "PATH": f"{BIN}:/usr/bin:/bin",
                 "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3", "ANSIBLE_HOST_KEY_CHECKING": "0"})
        seconds = time.monotonic() - t0
    doc = json.loads(proc.stdout[proc.stdout.index("{"):])
    result = doc["plays"][0]["tasks"][0]["hosts"][node]
    if proc.returncode != 0:
        raise SystemExit(f"apply failed ({proc.returncode}): {result.get('msg')}")
    return seconds, len(result.get("commands", [])), bool(result.get("changed"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--node", default="railyard-lab-ctl1", help="the controller's podman container")
    ap.add_argument("--accounts", type=int, default=50)
    ap.add_argument("--users", type=int, default=500)
    args = ap.parse_args()
    big = associations(accounting(args.accounts, args.users))
    lab = associations(yaml.safe_load(LAB.read_text()))
    rows = []
    for what, state, check in (("first apply", big, False), ("second apply", big, False),
                               ("check mode", big, True), ("back to the lab spec", lab, False)):
        seconds, commands, changed = apply(args.node, state, check)
        rows.append((what, seconds, commands, changed))
        print(f"{what:24} {seconds:7.1f} s  {commands:4} sacctmgr commands  changed={changed}", flush=True)
    assert not rows[1][3] and rows[1][2] == 0, "the second apply changed something"


if __name__ == "__main__":
    main()

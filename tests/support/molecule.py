"""Molecule scaffolding: the lab spec rendered for molecule, scenario discovery, variants.

Every molecule scenario configures its containers from the compiler's artifacts, the same
way the Pulumi lab does.  The lab itself owns ``10.77.0.0/24`` (podman network of
``railyard-lab-<node>`` containers) and podman refuses a second network with that subnet,
so molecule renders the lab spec with ONLY ``network.management.cidr`` moved
(:data:`MOLECULE_CIDR`); every other fact (names, groups, topology, GRES) stays the plan's.

``python -m tests.support.molecule prepare [--variant lab]`` is the shared dependency step
(.config/molecule/config.yml runs it before ``create``):

* renders the variant into ``.railyard/molecule/<variant>/artifacts`` (gitignored), with
  one host_vars file per host for the converge playbooks (:func:`write_host_vars`);
* creates the podman network :data:`NETWORK` with the variant's subnet (molecule's podman
  driver cannot set a subnet, so platforms join it with ``--network`` in ``extra_opts``
  and the driver never creates or deletes it);
* generates a munge key and a slurmdbd database password for this run (``.railyard/molecule/munge.key``,
  ``slurmdbd.password``, mode 0600, never
  committed, never printed) unless one exists; ``clean`` removes key and network.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
LAB_SPEC = ROOT / "inventories" / "lab" / "cluster.yaml"
STATE = Path(os.environ.get("RAILYARD_MOLECULE_STATE") or ROOT / ".railyard" / "molecule")
MUNGE_KEY = STATE / "munge.key"
SLURMDBD_PASSWORD = STATE / "slurmdbd.password"
# Overridable so that two checkouts (or CI jobs) on one machine can run side by side: give
# each its own network, subnet, state dir and podman store (a `podman --root ...` wrapper
# first on PATH); node names stay the plan's, so one podman store runs one scenario at a time.
NETWORK = os.environ.get("RAILYARD_MOLECULE_NETWORK", "railyard-molecule")
MOLECULE_NET = os.environ.get("RAILYARD_MOLECULE_NET", "10.78.0")  # first three octets
MOLECULE_CIDR = f"{MOLECULE_NET}.0/24"
BASE_CONFIG = ROOT / ".config" / "molecule" / "config.yml"


def artifacts_dir(variant: str = "lab") -> Path:
    return STATE / variant / "artifacts"


# --- spec variants -------------------------------------------------------------------


def lab_spec(cidr: str = MOLECULE_CIDR) -> dict[str, Any]:
    """The lab spec with only the management CIDR overridden."""
    spec = yaml.safe_load(LAB_SPEC.read_text())
    spec["network"]["management"]["cidr"] = cidr
    return spec


def scaled_spec(gpus: int, per_su: int = 4, cidr: str = MOLECULE_CIDR) -> dict[str, Any]:
    """The lab with *gpus* compute nodes and the SUs re-cut into groups of *per_su*.

    Kubernetes workers keep one per SU for the first two SUs (the plan requires every SU
    member to exist, not every SU to hold a worker).
    """
    spec = lab_spec(cidr)
    spec = copy.deepcopy(spec)
    for group in spec["nodes"]:
        if group["group"] == "gpu":
            group["count"] = gpus
    sus = []
    n_su = -(-gpus // per_su)
    for i in range(n_su):
        first, last = i * per_su + 1, min(gpus, (i + 1) * per_su)
        members = f"gpu[{first:03}-{last:03}]" if last > first else f"gpu{first:03}"
        if i < 2:
            members += f",kw{i + 1}"
        sus.append({"name": f"su{i + 1}", "nodes": members})
    rail = spec["fabric"]["rail_optimized"]
    rail["scalable_units"] = sus
    rail["leaf_radix"] = max(rail.get("leaf_radix", 8), per_su * 2 + 2)
    rail["spines"] = {"count": 2, "radix": max(8, n_su * 2)}
    slurm = spec["partitions"]["slurm"]
    for part in slurm["partitions"]:
        part["nodes"] = f"gpu[001-{gpus:03}]"
    spec["storage"]["lustre"]["clients"] = f"gpu[001-{gpus:03}],login1"
    return spec


def blocks_spec(cidr: str = MOLECULE_CIDR) -> dict[str, Any]:
    """The lab with every GPU node its own NVLink domain, as on HGX/DGX H100 systems (an
    8-GPU NVSwitch board per node): Slurm schedules it by topology/block, one block per node
    and BlockSizes=1,2, so a 2-node job stays inside its SU. The lab stays a switch tree,
    proven by the e2e; molecule/slurm_cluster runs this variant on the same nodes."""
    spec = lab_spec(cidr)
    spec["fabric"]["rail_optimized"]["nvlink"] = {"domain_nodes": 1}
    return spec


# The batch policy molecule/kubernetes proves on the ha variant, each proof beside a control
# that lacks the policy:
# - priorities: the lab's queue preempts lower priorities; CONTROL_QUEUE never does (and is
#   in no cohort, so it cannot borrow the other's idle quota either);
# - borrowing: in cohort "share", borrower borrows lender's idle GPUs and lender takes them
#   back by preemption (reclaim Any); in "share-control" the lender never reclaims;
# - fair sharing: in cohort "fair", fair-a and fair-b (weights 2:1, no quota of their own)
#   share fair-pool's CPUs; in "fair-control" the same with weights 1:1.
HA_PRIORITIES = [{"name": "training-high", "value": 1000, "description": "Production training runs"},
                 {"name": "batch", "value": 100, "description": "Sweeps and backfill"}]
CONTROL_QUEUE = "gpu-no-preemption"


def _ha_queues() -> list[dict[str, Any]]:
    reclaim = {"reclaim_within_cohort": "Any"}
    nothing = {"gpu": 0, "cpu": 0, "memory_mb": 0}
    queues: list[dict[str, Any]] = [{"name": CONTROL_QUEUE, "preemption": {"within_cluster_queue": "Never"}}]
    for cohort, lender_policy in (("share", reclaim), ("share-control", None)):
        queues += [{"name": f"{cohort}-lender", "cohort": cohort, "quotas": {"standin": {"gpu": 1}},
                    **({"preemption": lender_policy} if lender_policy else {})},
                   {"name": f"{cohort}-borrower", "cohort": cohort, "quotas": {"standin": {"gpu": 1}}}]
    for cohort, weights in (("fair", (2, 1)), ("fair-control", (1, 1))):
        queues.append({"name": f"{cohort}-pool", "cohort": cohort, "quotas": {"standin": {"gpu": 0}}})
        queues += [{"name": f"{cohort}-{side}", "cohort": cohort, "quotas": {"standin": nothing},
                    "fair_sharing_weight": weight, "preemption": reclaim}
                   for side, weight in zip("ab", weights)]
    return queues


def ha_spec(cidr: str = MOLECULE_CIDR) -> dict[str, Any]:
    """The lab with three Kubernetes control-plane nodes (kcp[1-3]: a 3-member etcd, an
    apiserver on each, behind every worker's haproxy), as a site runs it;
    molecule/kubernetes runs this variant and stops one of them. The lab itself keeps one.
    Its Kueue has priorities, preemption, borrowing and fair sharing (:func:`_ha_queues`)."""
    spec = lab_spec(cidr)
    next(g for g in spec["nodes"] if g["group"] == "kcp")["names"] = "kcp[1-3]"
    k8s = spec["partitions"]["kubernetes"]
    k8s["control_plane"] = "kcp[1-3]"
    k8s["priority_classes"] = copy.deepcopy(HA_PRIORITIES)
    kueue = k8s["kueue"]
    kueue["fair_sharing"] = True
    kueue["cluster_queues"][0]["preemption"] = {"within_cluster_queue": "LowerPriority"}
    added = _ha_queues()
    kueue["cohorts"] += [{"name": c} for c in dict.fromkeys(q["cohort"] for q in added if "cohort" in q)]
    kueue["cluster_queues"] += added
    namespace = kueue["local_queues"][0]["namespace"]
    kueue["local_queues"] += [{"name": q["name"], "namespace": namespace, "cluster_queue": q["name"]} for q in added]
    return spec


VARIANTS = {
    "lab": lambda: lab_spec(),
    "blocks": lambda: blocks_spec(),
    "ha": lambda: ha_spec(),
    "scale16": lambda: scaled_spec(16),
}


def compiled(variant: str = "lab"):
    """The variant's Plan, from railyard's own compiler (no re-derivation)."""
    from railyard.load import loads_plan

    spec = VARIANTS[variant]()
    return loads_plan(yaml.safe_dump(spec, sort_keys=False), source=f"<molecule:{variant}>")


def render(variant: str = "lab", out: Path | None = None) -> Path:
    """Render a variant into *out* (default: its artifacts dir); returns the dir."""
    from railyard import render as rrender

    plan = compiled(variant)
    out = out or artifacts_dir(variant)
    rrender.write(rrender.render(plan), out)
    write_host_vars(plan, out)
    return out


def write_host_vars(plan: Any, out: Path) -> None:
    """``ansible/host_vars/<host>.json``: each host's variables from the plan, but how to
    connect (molecule connects to its containers).

    Molecule's inventory is its own, so the rendered inventory's group_vars never reach
    it: the converge playbooks load a host's variables with ``vars_files`` from this one
    file (see any converge.yml), which holds exactly what the rendered inventory gives the
    host (railyard.compiler.inventory.split_vars). Written after the render, next to it."""
    from railyard.compiler.inventory import CONNECTION_VARS

    (out / "ansible" / "host_vars").mkdir(parents=True, exist_ok=True)
    for host, hv in plan.inventory.hostvars.items():
        mine = {k: v for k, v in hv.items() if k not in CONNECTION_VARS}
        (out / "ansible" / "host_vars" / f"{host}.json").write_text(json.dumps(mine, indent=1, sort_keys=True) + "\n")


def plan_summary(variant: str = "lab") -> dict[str, Any]:
    # rendered every time: a render left by an earlier checkout or spec would be compared
    return json.loads((render(variant) / "plan.json").read_text())


# --- podman / key -----------------------------------------------------------------------


def interpolated(value: Any) -> Any:
    """Molecule's ${VAR:-default} in a molecule.yml value, from the environment or the default."""
    if isinstance(value, str):
        return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m.group(1), m.group(2)), value)
    if isinstance(value, list):
        return [interpolated(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolated(v) for k, v in value.items()}
    return value


def podman_available() -> str | None:
    """None when podman and the node image are there, else the reason to skip."""
    if shutil.which("podman") is None:
        return "podman is not installed"
    from railyard.lab.image import IMAGE_REF

    probe = subprocess.run(["podman", "image", "exists", IMAGE_REF], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"image {IMAGE_REF} is missing: run `railyard lab image`"
    return None


def ensure_network(cidr: str = MOLECULE_CIDR) -> None:
    got = subprocess.run(["podman", "network", "inspect", NETWORK], capture_output=True, text=True, check=False)
    if got.returncode == 0:
        info = json.loads(got.stdout)[0]
        subnets = [s.get("subnet") for s in info.get("subnets") or []]
        if cidr in subnets:
            return
        subprocess.run(["podman", "network", "rm", NETWORK], check=True, capture_output=True)
    subprocess.run(
        ["podman", "network", "create", "--subnet", cidr, NETWORK],
        check=True,
        capture_output=True,
    )


def _secret_file(path: Path, value: str) -> Path:
    """A per-run secret, mode 0600 from its creation; never printed."""
    STATE.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(value)
    return path


def ensure_munge_key() -> Path:
    return _secret_file(MUNGE_KEY, base64.b64encode(secrets.token_bytes(1024)).decode())


def ensure_slurmdbd_password() -> Path:
    """The database password, as `railyard up` generates it (hex, 32 bytes)."""
    return _secret_file(SLURMDBD_PASSWORD, secrets.token_bytes(32).hex())


def prepare(variant: str = "lab") -> Path:
    from railyard.drivers.podman import host_problems

    problems = host_problems()
    if problems:  # the scenario's daemons would fail later, one by one, with `too many open files`
        raise SystemExit("molecule: this host cannot run the node containers:\n"
                         + "\n".join(f"- {p}" for p in problems))
    out = render(variant)
    ensure_network()
    ensure_munge_key()
    ensure_slurmdbd_password()
    return out


def clean(state: Path = STATE, network: str = NETWORK) -> None:
    """Drop the per-run secrets and the network (when no container uses it any more); a
    lane's own with its ``state`` and ``network`` (:meth:`Lane.env`)."""
    (state / MUNGE_KEY.name).unlink(missing_ok=True)
    (state / SLURMDBD_PASSWORD.name).unlink(missing_ok=True)
    if shutil.which("podman") is None:
        return
    users = subprocess.run(
        ["podman", "ps", "-aq", "--filter", f"network={network}"],
        capture_output=True,
        text=True, check=False)
    if users.returncode == 0 and not users.stdout.strip():
        subprocess.run(["podman", "network", "rm", network], capture_output=True, check=False)


# --- scenarios ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One molecule scenario: where molecule must run (cwd) and under which name."""

    name: str
    cwd: Path
    file: Path

    @property
    def id(self) -> str:
        return str(self.file.parent.relative_to(ROOT))

    def config(self) -> dict[str, Any]:
        return yaml.safe_load(self.file.read_text()) or {}


def scenarios() -> list[Scenario]:
    """Every scenario in the repo: roles/*/molecule/*/ and molecule/*/."""
    found = []
    for f in sorted(ROOT.glob("roles/*/molecule/*/molecule.yml")):
        found.append(Scenario(f.parent.name, f.parents[2], f))
    for f in sorted(ROOT.glob("molecule/*/molecule.yml")):
        found.append(Scenario(f.parent.name, ROOT, f))
    return found


def node_names(scenario: Scenario) -> set[str]:
    """The container names a scenario creates: its platforms' names (the base's `instance`
    for a scenario that lists none)."""
    config = scenario.config()
    platforms = config.get("platforms") or yaml.safe_load(BASE_CONFIG.read_text())["platforms"]
    return {p["name"] for p in platforms}


@dataclass(frozen=True)
class Lane:
    """Scenarios that share a container name, run one after another. Two lanes share no
    container name, podman network, subnet or state dir (munge key, renders), so `make test`
    can run them side by side (tests/conftest.py sends each lane out as one unit of work).
    Lane 0 keeps the defaults (:data:`NETWORK`, :data:`MOLECULE_NET`, :data:`STATE`); lane
    *i* gets ``<network>-<i>``, the next /24 (``10.78.<i>``) and ``<state>/lane<i>``."""

    index: int
    scenarios: tuple[str, ...]  # scenario ids

    @property
    def group(self) -> str:
        return f"molecule-lane{self.index}"

    def env(self) -> dict[str, str]:
        a, b, c = MOLECULE_NET.split(".")
        return {
            "RAILYARD_MOLECULE_NETWORK": NETWORK if self.index == 0 else f"{NETWORK}-{self.index}",
            "RAILYARD_MOLECULE_NET": f"{a}.{b}.{int(c) + self.index}",
            "RAILYARD_MOLECULE_STATE": str(STATE if self.index == 0 else STATE / f"lane{self.index}"),
        }


def lanes(found: list[Scenario] | None = None) -> list[Lane]:
    """The scenarios split into lanes: the groups of scenarios linked by a shared container
    name (one lane each), the lane with the most scenarios first."""
    found = scenarios() if found is None else found
    groups: list[tuple[set[str], list[str]]] = []  # (names, scenario ids)
    for scenario in found:
        names, ids = node_names(scenario), [scenario.id]
        for group in [g for g in groups if g[0] & names]:
            groups.remove(group)
            names, ids = names | group[0], group[1] + ids
        groups.append((names, ids))
    ordered = sorted(groups, key=lambda g: (-len(g[1]), min(g[1])))
    return [Lane(i, tuple(sorted(ids))) for i, (_names, ids) in enumerate(ordered)]


def lane_of(scenario_id: str, found: list[Scenario] | None = None) -> Lane:
    return next(lane for lane in lanes(found) if scenario_id in lane.scenarios)


def platform(node: str, plan: dict[str, Any]) -> dict[str, Any]:
    """The platform entry a scenario should carry for *node* (what the drift test expects)."""
    by_name = {n["name"]: n for n in plan["nodes"]}
    groups = sorted(g for g, members in plan["inventory_groups"].items() if node in members)
    return {
        "name": node,
        "groups": groups,
        "ip": by_name[node]["address"],
    }


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.molecule")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="render artifacts, create network and munge key")
    p.add_argument("--variant", default="lab", choices=sorted(VARIANTS))
    sub.add_parser("clean", help="remove the per-run munge key and the podman network")
    pl = sub.add_parser("platforms", help="print platform entries for nodes (YAML)")
    pl.add_argument("--variant", default="lab", choices=sorted(VARIANTS))
    pl.add_argument("nodes", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        out = prepare(args.variant)
        print(f"molecule artifacts: {out} (network {NETWORK} {MOLECULE_CIDR})")
    elif args.cmd == "clean":
        clean()
    else:
        plan = plan_summary(args.variant)
        print(yaml.safe_dump([platform(n, plan) for n in args.nodes], sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(_main())

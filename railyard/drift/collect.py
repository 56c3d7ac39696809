"""Collectors: thin I/O adapters that fill an :class:`Observed`. All judging is in compare.

``collect(plan, layers, runner)`` is the one entry point (the CLI's and the live
fault-injection suite's). Layers run in parallel, and inside a layer hosts do; each
layer has a deadline, and a host that does not answer in time is *unreachable*, never
"no drift". The ``runner`` runs a command on a node: :class:`PlanRunner` uses ``podman
exec`` for lab containers and ssh for the rest; a test passes a recorded one.

* slurm: ``scontrol show topology|node|partition`` on the first controller that answers;
* files: every planned role in check+diff mode through ansible-runner (railyard.drift.files);
* nodes: each node's driver ``observe()`` (railyard.drivers), then one ``systemctl show``
  for the units the plan's roles keep running or enabled (:func:`expected_units`);
* kubernetes: ``kubectl get`` of the Nodes and of the plan's Kueue/Volcano kinds, and
  etcd's member list, on the first control-plane node that answers, in plan order
  (railyard.drift.kubernetes), and the runtime versions recorded at the last ``railyard
  up`` (railyard.drift.applied).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from railyard.compiler import Plan
from railyard.compiler.nodes import Node
from railyard.drift.model import LAYERS, CheckError
from railyard.drift.observed import (
    EtcdObservation,
    FilesObservation,
    KubernetesObservation,
    NodeObservation,
    NodesObservation,
    Observed,
    SlurmObservation,
    UnitState,
    Unreachable,
)
from railyard.paths import ROOT

Log = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``command`` is one command on one host; the others are a whole layer."""

    command: float = 30.0
    nodes: float = 90.0
    slurm: float = 60.0
    files: float = 900.0
    kubernetes: float = 60.0

    def layer(self, name: str) -> float:
        return float(getattr(self, name))


# --------------------------------------------------------------------------- runners


@dataclass(frozen=True, slots=True)
class Result:
    rc: int
    stdout: str
    stderr: str


class HostUnreachable(Exception):
    """The command could not be started on the host at all (not: it ran and failed)."""


class Runner(Protocol):
    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        """Run ``argv`` on ``host``; raises :class:`HostUnreachable` if the host cannot be reached."""
        ...


class PlanRunner:
    """``podman exec`` into lab containers, ssh to every other node (redfish ones too)."""

    def __init__(self, plan: Plan) -> None:
        from railyard.apply.machines import node_spec
        from railyard.drivers import PodmanNode, SshNode

        self._argv: dict[str, Callable[[Sequence[str]], list[str]]] = {}
        self._podman: dict[str, bool] = {}
        for node in plan.nodes:
            spec = node_spec(plan, node)
            self._podman[node.name] = isinstance(spec, PodmanNode)
            if isinstance(spec, PodmanNode):
                self._argv[node.name] = lambda a, c=spec.container: ["podman", "exec", c, *a]
            else:
                user = node.provision.ssh_user
                ssh = spec if isinstance(spec, SshNode) else SshNode(node.name, plan.name, node.address, user)
                self._argv[node.name] = lambda a, s=ssh: _ssh(s, a)

    def run(self, host: str, argv: Sequence[str], timeout: float) -> Result:
        if host not in self._argv:
            raise HostUnreachable(f"{host} is not in the spec")
        cmd = self._argv[host](argv)
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"no answer within {timeout:.0f}s") from None
        except FileNotFoundError as exc:
            raise HostUnreachable(f"{cmd[0]} is not installed here ({exc.strerror})") from None
        err = proc.stderr.strip()
        # podman exec: 125 is podman's own failure (no such container, not running);
        # ssh: 255 is ssh's own failure (refused, no route, auth).
        if (self._podman[host] and proc.returncode == 125) or (not self._podman[host] and proc.returncode == 255):
            raise HostUnreachable(err.splitlines()[-1] if err else f"exit {proc.returncode}")
        return Result(proc.returncode, proc.stdout, proc.stderr)


def _ssh(node: Any, argv: Sequence[str]) -> list[str]:
    from railyard.drivers.ssh import ssh_command

    return ssh_command(node, shlex.join(argv))


# --------------------------------------------------------------------------- roles


def role_exists(root: Path, role: str) -> bool:
    return (root / "roles" / role / "tasks" / "main.yml").is_file()


def unit_roles(root: Path = ROOT) -> list[str]:
    """The roles, in STEPS order, that exist and keep systemd units (``units`` in their
    ``meta/railyard.yml``): the ones whose units the nodes layer checks."""
    from railyard.apply import roles
    from railyard.apply.playbooks import STEPS

    return [s.role for s in STEPS if role_exists(root, s.role) and roles.facts(root, s.role).get("units")]


def expected_units(plan: Plan, roles: Sequence[str], root: Path = ROOT) -> dict[str, tuple[tuple[str, str, str], ...]]:
    """host -> ((unit, want, role), ...): what the given (existing) roles keep on each host.

    What a role keeps is the role's fact (``units`` in its ``meta/railyard.yml``, read with
    the variables the plan gives it); where it runs is the plan's (its Step's group). Per
    host: the units kept active, in STEPS order, then those kept enabled; a unit two roles
    name counts once, for the first. ``enabled`` is for NFS mount units: nfs_client always
    installs and enables them but mounts only where the kernel has an NFS client (the lab's
    does not). Left out: units whose names a role picks at run time (kernel nfsd or
    nfs-ganesha) and Lustre mounts (the lab has no Lustre server to mount from).
    """
    from collections import ChainMap

    from railyard.apply import roles as role_facts
    from railyard.apply.playbooks import ROLE_VARS, STEPS, group_hosts
    from railyard.compiler.inventory import cluster_vars

    everywhere = cluster_vars(plan)
    units: dict[str, list[tuple[str, str, str]]] = {}
    for step in STEPS:
        if step.role not in roles:
            continue
        extravars = ROLE_VARS.get(step.role, lambda _p: {})(plan)
        for h in group_hosts(plan, step.group):
            inventory = ChainMap(plan.inventory.hostvars[h], everywhere)
            mine = units.setdefault(h, [])
            for unit, want in role_facts.units(root, step.role, extravars, inventory):
                if all(u[0] != unit for u in mine):
                    mine.append((unit, want, step.role))
    return {h: tuple(sorted(u, key=lambda x: x[1] != "active")) for h, u in units.items() if u}


SHOW_PROPERTIES = "Id,LoadState,ActiveState,SubState,UnitFileState"


def systemctl_show_argv(units: Sequence[str]) -> list[str]:
    return ["systemctl", "show", "-p", SHOW_PROPERTIES, *units]


def parse_systemctl_show(wanted: Sequence[tuple[str, ...]], stdout: str) -> tuple[UnitState, ...]:
    """``systemctl show -p ... a b``: one block of Key=Value per unit, blank-line separated.

    ``wanted`` is (unit, want[, role]) per unit, as :func:`expected_units` gives them.
    """
    blocks: dict[str, dict[str, str]] = {}
    for block in stdout.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.strip().splitlines() if "=" in line)
        if props.get("Id"):
            blocks[props["Id"]] = props
    out = []
    for unit, want, *role in wanted:
        p = blocks.get(unit, {})
        out.append(UnitState(unit, want, p.get("ActiveState", ""), p.get("SubState", ""),
                             p.get("UnitFileState", ""), p.get("LoadState", "not-found" if not p else ""),
                             role[0] if role else ""))
    return tuple(out)


JOURNAL_LINES = 3  # of a unit that should run and does not: why, in its own words
JOURNAL_CHARS = 300


def journal_argv(unit: str) -> list[str]:
    return ["journalctl", "--no-pager", "--quiet", "--output=cat", f"--lines={JOURNAL_LINES}", f"--unit={unit}"]


def _with_journal(name: str, services: tuple[UnitState, ...], runner: Runner,
                  timeouts: Timeouts) -> tuple[UnitState, ...]:
    """Each unit the plan has running that is not: its journal's last lines, so the finding
    says why (a crash loop shows as `activating (auto-restart)`, its reason only here)."""
    from dataclasses import replace

    out = []
    for u in services:
        if u.want == "active" and u.active != "active" and u.load == "loaded":
            try:
                res = runner.run(name, journal_argv(u.unit), timeouts.command)
            except HostUnreachable:
                res = None
            if res is not None and res.rc == 0 and res.stdout.strip():
                lines = [line.strip() for line in res.stdout.strip().splitlines() if line.strip()]
                u = replace(u, log=" | ".join(lines)[-JOURNAL_CHARS:])
        out.append(u)
    return tuple(out)


# --------------------------------------------------------------------------- slurm


def _scontrol_failure(res: Result, ctl: str) -> str:
    if res.rc == 127:
        return f"scontrol is not installed on {ctl}"
    text = (res.stderr or res.stdout).strip()
    return text.splitlines()[-1] if text else f"scontrol exit {res.rc}"


def collect_slurm(plan: Plan, runner: Runner, timeouts: Timeouts = Timeouts()) -> SlurmObservation:
    from railyard.drift.slurm import parse_nodes, parse_partitions, parse_topology

    assert plan.slurm is not None
    commands = {
        "topology": ["scontrol", "show", "topology"],
        "node": ["scontrol", "show", "node"],
        "partition": ["scontrol", "show", "partition"],
    }
    last = Unreachable(plan.slurm.controllers[0], "no controller in the spec")
    for ctl in plan.slurm.controllers:
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            futures = {k: pool.submit(runner.run, ctl, argv, timeouts.command) for k, argv in commands.items()}
            results: dict[str, Result] = {}
            try:
                for k, fut in futures.items():
                    results[k] = fut.result()
            except HostUnreachable as exc:
                last = Unreachable(ctl, str(exc))
                continue
        for key in ("node", "partition"):
            if results[key].rc != 0:
                return SlurmObservation(ctl, failure=_scontrol_failure(results[key], ctl))
        topo = results["topology"]
        if topo.rc != 0 and "No topology information" not in topo.stderr:
            return SlurmObservation(ctl, failure=_scontrol_failure(topo, ctl))
        switches, blocks = parse_topology(topo.stdout)
        return SlurmObservation(
            controller=ctl,
            nodes=tuple(parse_nodes(results["node"].stdout)),
            partitions=tuple(parse_partitions(results["partition"].stdout)),
            switches=tuple(switches),
            blocks=tuple(blocks),
        )
    return SlurmObservation(last.host, unreachable=last)


# --------------------------------------------------------------------------- nodes


def _observe_one(plan: Plan, name: str, runner: Runner, units: tuple[tuple[str, str, str], ...],
                 timeouts: Timeouts) -> NodeObservation:
    from railyard.apply.machines import node_spec
    from railyard.drivers import PodmanNode, RedfishNode, driver_for

    node = plan.node(name)
    spec = node_spec(plan, node)
    handle = spec.container if isinstance(spec, PodmanNode) else (
        spec.bmc.address if isinstance(spec, RedfishNode) else f"{spec.user}@{spec.address}")
    if isinstance(spec, RedfishNode):
        spec = _with_bmc_password(node, spec)
    state = driver_for(spec).observe(spec)
    services: tuple[UnitState, ...] = ()
    reachable = state.reachable
    detail = state.detail
    if reachable and units:
        try:
            res = runner.run(name, systemctl_show_argv([u[0] for u in units]), timeouts.command)
        except HostUnreachable as exc:
            reachable, detail = False, str(exc)
        else:
            if res.rc != 0:
                raise CollectorError(f"{name}: `systemctl show` failed (exit {res.rc}): {res.stderr.strip()[:200]}")
            services = _with_journal(name, parse_systemctl_show(units, res.stdout), runner, timeouts)
    return NodeObservation(name, spec.driver, handle, state.exists, state.power, reachable, detail, services)


def _with_bmc_password(node: Node, spec: Any) -> Any:
    """Redfish needs the BMC password; env: and file: references resolve here."""
    from dataclasses import replace

    from railyard.apply.secrets import parse_ref, resolve

    bmc = node.provision.bmc
    assert bmc is not None
    kind, _ = parse_ref(bmc.password.ref)
    if kind == "pulumi":
        raise CollectorError(f"BMC password {bmc.password.ref}: a pulumi: reference resolves only inside the "
                             "Pulumi program; use env: or file: to check drift on this node")
    return replace(spec, bmc=replace(spec.bmc, password=resolve(bmc.password.ref)))


def collect_nodes(plan: Plan, runner: Runner, *, root: Path = ROOT, timeouts: Timeouts = Timeouts(),
                  workers: int = 8) -> NodesObservation:
    units = expected_units(plan, unit_roles(root), root)
    names = [n.name for n in plan.nodes]
    out: dict[str, NodeObservation] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(names))))
    try:
        futures = {n: pool.submit(_observe_one, plan, n, runner, units.get(n, ()), timeouts) for n in names}
        deadline = time.monotonic() + timeouts.nodes
        for n, fut in futures.items():
            try:
                out[n] = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                out[n] = NodeObservation(n, "", n, True, "unknown", False,
                                         f"the driver did not answer within {timeouts.nodes:.0f}s")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return NodesObservation(tuple(out[n] for n in names))


# --------------------------------------------------------------------------- files


class CollectorError(RuntimeError):
    """A collector could not run at all; the message says why and what to do."""


@dataclass
class FilesRun:
    """What one check-mode run needs; built by :func:`prepare_files`, pure but for the disk."""

    playbook: str  # one play per role, in STEPS order
    inventory: str
    extravars: dict[str, Any]
    hosts: tuple[str, ...]
    roles: tuple[str, ...]
    notes: list[str] = field(default_factory=list)
    planned: tuple[Any, ...] = ()  # the runnable PlannedPlaybooks, in order
    secrets: Mapping[str, str] = field(default_factory=dict)

    def limited(self, pairs: Mapping[str, Sequence[str]]) -> FilesRun:
        """The same run over only ``role -> hosts`` (one play per role that has any)."""
        from railyard.drift.files import check_playbook

        plays = [(pb.role, ",".join(pairs[pb.role])) for pb in self.planned if pairs.get(pb.role)]
        return dataclasses.replace(self, playbook=check_playbook(plays))

    def key(self, pb: Any) -> str:
        from railyard.drift.baseline import key_of

        return key_of(pb.digest, {name: self.secrets.get(name, "") for _var, name in pb.secrets})


def prepare_files(plan: Plan, root: Path, secrets: Mapping[str, str]) -> FilesRun:
    """The roles to check and their variables: the Pulumi program's own planning."""
    from railyard.apply.artifacts import write_artifacts
    from railyard.apply.playbooks import plan_playbooks
    from railyard.drift.files import check_playbook
    from railyard.render import render

    artifacts = render(plan)
    adir = write_artifacts(root, plan, artifacts)
    planned, notes = plan_playbooks(plan, root, artifacts)
    runnable = []
    extravars: dict[str, Any] = {"railyard_artifacts_dir": str(adir)}
    for pb in planned:
        missing = [name for _var, name in pb.secrets if name not in secrets]
        if missing:
            notes.append(f"role {pb.role} not checked: it needs the {', '.join(missing)} secret, which lives in "
                         "the Pulumi stack; pass --stack")
            continue
        runnable.append(pb)
        extravars.update(pb.vars)
        extravars.update({var: secrets[name] for var, name in pb.secrets})
    hosts = tuple(dict.fromkeys(h for pb in runnable for h in pb.hosts))
    return FilesRun(
        playbook=check_playbook((pb.role, pb.group) for pb in runnable),
        inventory=f"{adir}/ansible/inventory.json",
        extravars=extravars,
        hosts=hosts,
        roles=tuple(pb.role for pb in runnable),
        notes=notes,
        planned=tuple(runnable),
        secrets=dict(secrets),
    )


def run_check_mode(run: FilesRun, root: Path, timeouts: Timeouts) -> tuple[list[dict[str, Any]], Any]:
    """The run's playbook with ``--check --diff``: ``(events, (status, rc, tail))``.
    Events stay in memory (never on disk: no_log or not)."""
    import ansible_runner

    from railyard.apply.playbooks import runner_settings

    events: list[dict[str, Any]] = []

    def keep(event: dict[str, Any]) -> bool:
        events.append(event)
        return False

    with tempfile.TemporaryDirectory(prefix="railyard-drift-") as tmp:
        os.chmod(tmp, 0o700)
        (Path(tmp) / "project").mkdir()
        (Path(tmp) / "project" / "site.yml").write_text(run.playbook)
        # The same inventories, roles and connection as the Playbook resources use.
        inventories, envvars = runner_settings(root, run.inventory, Path(tmp))
        result = ansible_runner.run(
            private_data_dir=tmp,
            playbook="site.yml",
            inventory=inventories,
            extravars=run.extravars,
            cmdline="--check --diff",
            quiet=True,
            event_handler=keep,
            timeout=int(timeouts.files),
            envvars={
                **envvars,
                "ANSIBLE_TIMEOUT": str(int(timeouts.command)),  # connection
                "ANSIBLE_TASK_TIMEOUT": str(int(timeouts.files)),
                "ANSIBLE_RETRY_FILES_ENABLED": "0",
            },
        )
        status, rc = result.status, result.rc
        tail = ""
        if status != "successful" or rc is None:  # the events may not say why (a playbook error, a kill)
            try:
                tail = "\n".join(result.stdout.read().strip().splitlines()[-5:])
            except Exception:  # noqa: BLE001 - only for the message
                tail = ""
    return events, (status, rc, tail)


def baseline_path(root: Path, plan: Plan) -> Path:
    """Where this machine keeps the cluster's drift baselines (railyard.drift.baseline)."""
    return root / ".railyard" / "drift" / f"{plan.name}.json"


def probe_hosts(runner: Runner, want: Mapping[str, set[str]], timeouts: Timeouts) -> dict[str, dict[str, Any]]:
    """host -> the probe's output, one command per host, side by side; a host that does not
    answer, or answers with something else than the probe's JSON, is left out."""
    from railyard.drift.baseline import CONTROLLER, probe_argv

    def one(host: str) -> dict[str, Any] | None:
        argv = probe_argv(want[host])
        try:
            if host == CONTROLLER:  # what a role read on this machine (delegate_to: localhost)
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeouts.command, check=False)
                res = Result(proc.returncode, proc.stdout, proc.stderr)
            else:
                res = runner.run(host, argv, timeouts.command)
        except (HostUnreachable, subprocess.TimeoutExpired):
            return None
        if res.rc != 0:
            return None
        try:
            out = json.loads(res.stdout)
        except ValueError:
            return None
        return out if isinstance(out, dict) else None

    if not want:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(want))) as pool:
        got = dict(zip(want, pool.map(one, want)))
    return {h: v for h, v in got.items() if v is not None}


def _wanted(reads: Iterable[Sequence[str]]) -> dict[str, set[str]]:
    want: dict[str, set[str]] = {}
    for host, item in reads:
        want.setdefault(host, set()).add(item)
    return want


def _unchanged_pairs(run: FilesRun, store: Any, runner: Runner, timeouts: Timeouts) -> set[tuple[str, str]]:
    """(role, host) pairs whose probe matches a baseline made under the plan's own key."""
    from railyard.drift.baseline import Targets, fingerprint

    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for pb in run.planned:
        key = run.key(pb)
        for host in pb.hosts:
            entry = store.get(pb.role, host, key)
            if entry is not None:
                entries[(pb.role, host)] = entry
    probes = probe_hosts(runner, _wanted(r for e in entries.values() for r in e["reads"]), timeouts)
    same = set()
    for pair, entry in entries.items():
        targets = Targets(tuple((h, i) for h, i in entry["reads"]))
        if fingerprint(targets, probes) == entry["fingerprint"]:
            same.add(pair)
    return same


def _record_baselines(plan: Plan, root: Path, run: FilesRun, pairs: Mapping[str, Sequence[str]],
                      events: list[dict[str, Any]], summary: Any, store: Any, runner: Runner,
                      timeouts: Timeouts) -> None:
    """After a check-mode run: a new baseline for each pair it found clean, none for the rest."""
    from railyard.drift.baseline import fingerprint, hidden_paths, targets_of
    from railyard.drift.files import PLAY_PREFIX

    dirty = {(c.role, c.host) for c in summary.changes} | {(f.role, f.host) for f in summary.failures}
    gone = {u.host for u in summary.unreachable}
    by_address = {str(v.get("ansible_host")): h for h, v in plan.inventory.hostvars.items() if v.get("ansible_host")}
    hidden = {pb.role: paths for pb in run.planned
              if (paths := hidden_paths(root, pb.role, run.extravars)) is not None}
    targets = targets_of(events, PLAY_PREFIX, by_address, hidden)
    keep: dict[tuple[str, str], Any] = {}
    for pb in run.planned:
        for host in pairs.get(pb.role, ()):
            t = targets.get((pb.role, host))
            clean = (pb.role, host) not in dirty and host not in gone and host in summary.seen
            if clean and t is not None and t.reads and not t.uncacheable:
                keep[(pb.role, host)] = (pb, t)
            else:
                store.drop(pb.role, host)
    probes = probe_hosts(runner, _wanted(r for _pb, t in keep.values() for r in t.reads), timeouts)
    for (role, host), (pb, t) in keep.items():
        print_ = fingerprint(t, probes)
        if print_ is None or not t.agrees(print_):
            store.drop(role, host)
        else:
            store.put(role, host, run.key(pb), t, print_)


def collect_files(plan: Plan, *, root: Path = ROOT, secrets: Mapping[str, str] | None = None,
                  timeouts: Timeouts = Timeouts(), runner: Runner | None = None,
                  full: bool = False) -> tuple[FilesObservation, list[str]]:
    """Every planned role in check mode, except (unless ``full``) the (role, host) pairs
    whose one-probe-per-host fingerprint still matches the baseline of the last clean
    check under the same plan (railyard.drift.baseline)."""
    from railyard.drift.baseline import Store
    from railyard.drift.files import summarize_events

    run = prepare_files(plan, root, secrets or {})
    if not run.roles:
        return FilesObservation(hosts=(), roles=()), run.notes
    notes = list(run.notes)
    runner = runner or PlanRunner(plan)
    store = Store.load(baseline_path(root, plan))
    same = set() if full else _unchanged_pairs(run, store, runner, timeouts)
    pairs = {pb.role: [h for h in pb.hosts if (pb.role, h) not in same] for pb in run.planned}
    total = sum(len(pb.hosts) for pb in run.planned)
    checked = sum(len(v) for v in pairs.values())
    notes.append(f"files: {total - checked} of {total} role-host pairs unchanged since a clean check "
                 f"(one probe per host); {checked} ran in check mode" + (" (--full)" if full else ""))
    if not checked:
        return FilesObservation(hosts=run.hosts, roles=run.roles), notes
    limited = run.limited(pairs)
    for attempt in (1, 2):
        events, (status, rc, tail) = run_check_mode(limited, root, timeouts)
        if status == "timeout":
            raise CollectorError(f"ansible-playbook --check did not finish within {timeouts.files:.0f}s")
        summary = summarize_events(events)
        if summary.finished:
            break
        ended = "killed by a signal" if rc is None else f"exit {rc}"
        stopped = f"ansible-playbook --check stopped early ({status}, {ended})" + (f": {tail}" if tail else "")
        # A check run changes nothing, so one killed from outside (seen once, not
        # reproduced) is run again rather than losing every role's findings.
        if rc is not None or attempt == 2:
            raise CollectorError(stopped + (" (also on the run before)" if attempt == 2 else ""))
        notes.append(f"files: {stopped}; ran it again")
    _record_baselines(plan, root, run, pairs, events, summary, store, runner, timeouts)
    store.save()
    return FilesObservation(
        hosts=run.hosts,
        roles=run.roles,
        changes=summary.changes,
        failures=summary.failures,
        unreachable=summary.unreachable,
    ), notes


# --------------------------------------------------------------------------- secrets


def stack_secrets(stack: str, root: Path = ROOT) -> dict[str, str]:
    """The stack's generated secrets by purpose (``munge`` -> base64), from its state."""
    from railyard.apply.engine import engine_env, pulumi_bin

    bin_dir = pulumi_bin()
    env = {**os.environ, **engine_env(stack, bin_dir)}
    try:
        proc = subprocess.run([str(bin_dir / "pulumi"), "stack", "export", "--show-secrets", "--stack", stack],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise CollectorError(f"`pulumi stack export --stack {stack}` did not finish within 120s") from None
    if proc.returncode != 0:
        raise CollectorError(f"cannot read stack {stack}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return secrets_from_deployment(json.loads(proc.stdout))


def secrets_from_deployment(state: Mapping[str, Any]) -> dict[str, str]:
    """``pulumi stack export --show-secrets`` -> {purpose: value} of railyard:secrets:Key resources."""
    out: dict[str, str] = {}
    for res in (state.get("deployment") or {}).get("resources") or []:
        if not str(res.get("type", "")).endswith("railyard/secrets:Key"):
            continue
        outputs = res.get("outputs") or {}
        value = outputs.get("value")
        if isinstance(value, Mapping) and "plaintext" in value:
            value = json.loads(value["plaintext"])
        purpose = outputs.get("purpose")
        if isinstance(purpose, Mapping) and "plaintext" in purpose:
            purpose = json.loads(purpose["plaintext"])
        if isinstance(value, str) and isinstance(purpose, str):
            out[purpose] = value
    return out


def spec_secrets(plan: Plan) -> dict[str, str]:
    """Secrets the spec references directly (env:, file:), which need no stack."""
    from railyard.apply.secrets import parse_ref, resolve

    out: dict[str, str] = {}
    slurm = plan.spec.partitions.slurm
    if slurm is not None and slurm.munge_key is not None:
        kind, _ = parse_ref(slurm.munge_key.ref)
        if kind != "pulumi":
            out["munge"] = resolve(slurm.munge_key.ref)
    acct = slurm.accounting if slurm is not None else None
    if acct is not None and acct.storage_password is not None and parse_ref(acct.storage_password.ref)[0] != "pulumi":
        out["slurmdbd"] = resolve(acct.storage_password.ref)
    return out


# --------------------------------------------------------------------------- all


KUBECTL = ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"]  # as roles/k8s_control_plane writes it
# etcd on each control-plane node as roles/k8s_control_plane configures it (kubeadm's
# layout): TLS with client-cert-auth on loopback and the node's address, certificates
# from an etcd CA apart from the cluster CA; the probe presents the health check client
# certificate (CN kube-etcd-healthcheck-client, key readable by root only) that the role
# writes for it. The probe asks the local member, which lists all of them.
ETCD_ENDPOINT = "https://127.0.0.1:2379"
ETCD_CA = "/etc/kubernetes/pki/etcd/ca.crt"
ETCD_CLIENT_CERT = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
ETCD_CLIENT_KEY = "/etc/kubernetes/pki/etcd/healthcheck-client.key"


def etcd_probe() -> list[str]:
    """The etcd probe as it runs on a control-plane node, with the role's files."""
    from railyard.drift.kubernetes import etcd_probe_argv

    return etcd_probe_argv(ETCD_ENDPOINT, ETCD_CA, ETCD_CLIENT_CERT, ETCD_CLIENT_KEY)


def first_answering(hosts: Sequence[str], ask: Callable[[str], Any]) -> tuple[str, Any, tuple[Unreachable, ...]]:
    """``ask(host)`` on each host in order until one answers: (that host, its answer, the
    hosts before it that did not). Any control-plane node can answer for the cluster, so
    one that is down must not hide the others; raises HostUnreachable naming every host
    tried, and why, when none does."""
    missed: list[Unreachable] = []
    for host in hosts:
        try:
            return host, ask(host), tuple(missed)
        except HostUnreachable as exc:
            missed.append(Unreachable(host, str(exc)))
    tried = "; ".join(f"{u.host}: {u.reason}" for u in missed) or "none in the spec"
    raise HostUnreachable(f"no control-plane node answers ({tried})")


def _no_kubectl(res: Result) -> bool:
    return res.rc == 127 or "No such file" in res.stderr or "not found in $PATH" in res.stderr


def _etcd(host: str, res: Result) -> EtcdObservation:
    from railyard.drift.kubernetes import etcd_from_probe

    if res.rc != 0:
        text = (res.stderr or res.stdout).strip()
        return EtcdObservation(host, ETCD_ENDPOINT, unreadable=f"the etcd probe exited {res.rc}: "
                                                               f"{text.splitlines()[-1] if text else 'no output'}")
    return etcd_from_probe(host, res.stdout)


def collect_kubernetes(plan: Plan, runner: Runner, timeouts: Timeouts = Timeouts(), *,
                       root: Path = ROOT) -> KubernetesObservation:
    """Nodes, the plan's Kueue/Volcano objects and etcd's members, as the first
    control-plane node that answers sees them (the observation names it, and those that
    did not answer before it), and the runtimes recorded when ``railyard up`` last finished."""
    from railyard.drift import applied
    from railyard.drift.kubernetes import dns_from_deployment, kinds_of, observation

    k = plan.kubernetes
    assert k is not None
    kinds = kinds_of([*k.kueue, *k.volcano])
    commands = {"nodes": [*KUBECTL, "get", "nodes", "-o", "json"], "etcd": etcd_probe(),
                "dns": [*KUBECTL, "-n", "kube-system", "get", "deployment", "coredns", "--ignore-not-found", "-o", "json"]}
    if kinds:
        commands["objects"] = [*KUBECTL, "get", ",".join(kinds), "-A", "-o", "json"]

    def ask(host: str) -> dict[str, Result]:
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            futures = {name: pool.submit(runner.run, host, argv, timeouts.command) for name, argv in commands.items()}
            return {name: fut.result() for name, fut in futures.items()}

    # no control-plane node answers: HostUnreachable, a check error naming each
    host, results, missed = first_answering(k.control_plane, ask)
    etcd = _etcd(host, results.pop("etcd"))
    for name, res in results.items():
        if _no_kubectl(res):
            return KubernetesObservation(deployed=False, reason=f"no kubectl on {host}: the k8s_control_plane "
                                                                f"role has not run there", host=host, unanswered=missed)
        if res.rc != 0:
            said = f"; etcd there: {etcd.failure}" if etcd.failure else ""
            raise RuntimeError(f"`{' '.join(commands[name])}` on {host} failed (rc {res.rc}): "
                               f"{res.stderr.strip()[-400:]}{said}")
    try:
        dns = dns_from_deployment(results.pop("dns").stdout)
    except ValueError as exc:
        raise RuntimeError(f"`{' '.join(commands['dns'])}` on {host}: {exc}") from None
    docs: dict[str, Any] = {}
    for name, res in results.items():
        try:
            docs[name] = json.loads(res.stdout)
        except ValueError:
            raise RuntimeError(f"`{' '.join(commands[name])}` on {host} printed no JSON: "
                               f"{res.stdout.strip()[:200]!r}") from None
    lists = [docs["objects"]] if "objects" in docs else []
    record = applied.record_path(root, plan.name)
    return dataclasses.replace(observation(docs["nodes"], lists, etcd, dns), host=host, unanswered=missed,
                               applied_runtimes=applied.load(record), applied_record=str(record))


def record_applied(plan: Plan, runner: Runner | None = None, *, root: Path = ROOT,
                   timeouts: Timeouts = Timeouts()) -> str:
    """After ``railyard up``: record each worker's container runtime version as its Node
    reports it (railyard.drift.applied). Returns what was recorded, or why nothing was;
    never raises for a cluster that does not answer: the apply itself is done."""
    from railyard.drift import applied
    from railyard.drift.kubernetes import runtimes_from_nodes

    k = plan.kubernetes
    if k is None:
        return "no Kubernetes partition: no container runtimes to record"
    run = (runner or PlanRunner(plan)).run
    try:
        host, res, _ = first_answering(k.control_plane,
                                       lambda h: run(h, [*KUBECTL, "get", "nodes", "-o", "json"], timeouts.command))
        if res.rc != 0:
            return f"container runtimes not recorded: kubectl on {host} exited {res.rc}: {res.stderr.strip()[-200:]}"
        seen = runtimes_from_nodes(json.loads(res.stdout))
    except (HostUnreachable, ValueError, AttributeError) as exc:
        return f"container runtimes not recorded: {exc}"
    path = applied.record_path(root, plan.name)
    # a worker that does not report now keeps what it ran at the last apply
    now = {n: v for n, v in {**(applied.load(path) or {}), **seen}.items() if n in k.workers}
    try:
        applied.save(path, now)
    except OSError as exc:
        return f"container runtimes not recorded: {path}: {exc.strerror}"
    if not now:
        return "no worker reports a container runtime yet: none recorded"
    return f"recorded the container runtime of {len(now)} worker(s) in {path}: {', '.join(sorted(set(now.values())))}"


def collect(
    plan: Plan,
    layers: Sequence[str] = LAYERS,
    runner: Runner | None = None,
    *,
    root: Path = ROOT,
    secrets: Mapping[str, str] | None = None,
    timeouts: Timeouts = Timeouts(),
    log: Log = _quiet,
    full: bool = False,
) -> Observed:
    """Observe the requested layers in parallel; a layer that fails becomes a CheckError."""
    unknown = [layer for layer in layers if layer not in LAYERS]
    if unknown:
        raise ValueError(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(LAYERS)}")
    runner = runner or PlanRunner(plan)
    notes: list[str] = []
    errors: list[CheckError] = []
    got: dict[str, Any] = {}
    jobs: dict[str, Callable[[], Any]] = {}
    if "nodes" in layers:
        jobs["nodes"] = lambda: collect_nodes(plan, runner, root=root, timeouts=timeouts)
    if "slurm" in layers:
        if plan.slurm is None:
            notes.append("slurm: the spec has no Slurm partition")
        elif not role_exists(root, "slurm_controller"):
            notes.append("slurm: not checked: role slurm_controller does not exist yet")
        else:
            jobs["slurm"] = lambda: collect_slurm(plan, runner, timeouts)
    if "files" in layers:
        jobs["files"] = lambda: collect_files(plan, root=root, secrets=secrets, timeouts=timeouts, runner=runner,
                                              full=full)
    if "kubernetes" in layers:
        if plan.kubernetes is None:
            notes.append("kubernetes: the spec has no Kubernetes partition")
        else:
            jobs["kubernetes"] = lambda: collect_kubernetes(plan, runner, timeouts, root=root)

    timings: dict[str, float] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(jobs)))
    try:
        started = time.monotonic()
        futures: dict[str, Future[Any]] = {name: pool.submit(_timed, job) for name, job in jobs.items()}
        for name, fut in futures.items():
            limit = timeouts.layer(name) + timeouts.command  # the layer's own limits act first
            try:
                value, took = fut.result(timeout=max(0.0, started + limit - time.monotonic()))
            except FutureTimeout:
                errors.append(CheckError(name, name, f"{name}: no result within {limit:g}s"))
                continue
            except Exception as exc:  # noqa: BLE001 - any collector failure is a check error
                errors.append(CheckError(name, name, f"{name}: {exc}"))
                continue
            timings[name] = took
            log(f"{name}: collected in {took:.1f}s")
            if name == "files":
                value, files_notes = value
                notes += files_notes
            got[name] = value
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return Observed(
        slurm=got.get("slurm"),
        files=got.get("files"),
        nodes=got.get("nodes"),
        kubernetes=got.get("kubernetes"),
        errors=tuple(errors),
        notes=tuple(notes),
        timings=timings,
    )


def _timed(job: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    value = job()
    return value, time.monotonic() - t0

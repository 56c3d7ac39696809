"""``compare(plan, observed) -> DriftReport``: pure, so recorded observations test it.

Each layer compares only what the compiler decided (the plan) with what was observed;
fields railyard does not set (Slurm's CPULoad, a Kueue status) are never compared, so a
healthy cluster reports nothing. Every finding names the host or object, what differs,
expected and observed, and the command that restores it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from railyard import builds
from railyard.compiler import Plan
from railyard.drift.kubernetes import quantity
from railyard.drift.model import SPARE_IN_SCHEDULER, UNREACHABLE, CheckError, DriftReport, Finding
from railyard.drift.observed import (
    EtcdMember,
    EtcdObservation,
    FileChange,
    FilesObservation,
    KubernetesObservation,
    NodesObservation,
    NodeVersions,
    Observed,
    SlurmNode,
    SlurmObservation,
    UnitState,
)
from railyard.drift.slurm import time_seconds
from railyard.hostlist import expand, fold

# Node states in which a node runs jobs; flags that take it out of service or say why.
IN_SERVICE = ("IDLE", "ALLOCATED", "MIXED", "COMPLETING")
OUT_OF_SERVICE = (
    "DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
    "INVALID_REG", "INVAL", "UNKNOWN", "FUTURE", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN",
    "POWERING_UP", "REBOOT_REQUESTED", "REBOOT_ISSUED",
)


class _Fix:
    """The commands a fix names, for this stack."""

    def __init__(self, plan: Plan, stack: str | None) -> None:
        name = stack or ("lab" if plan.is_lab else "<stack>")
        self.up = f"`railyard up --stack {name}`"
        self.refresh = f"`railyard up --stack {name} --refresh`"

    def role(self, role: str) -> str:
        return f"{self.up} re-applies role {role}" if role else f"{self.up} restores it"


def _line_counts(plan_only: int, host_only: int) -> str:
    """``2 plan lines missing, 3 extra``; the host's file is the one that drifted."""
    s = "s" if plan_only != 1 else ""
    if plan_only and host_only:
        return f"{plan_only} plan line{s} missing, {host_only} extra"
    if plan_only:
        return f"{plan_only} plan line{s} missing"
    if host_only:
        return f"{host_only} extra line{'s' if host_only != 1 else ''}"
    return "whitespace only"


def _hl(names: Iterable[str]) -> str:
    names = list(names)
    return fold(names) if names else "none"


# --------------------------------------------------------------------------- nodes


def compare_nodes(plan: Plan, obs: NodesObservation, fix: _Fix) -> list[Finding]:
    out = []
    planned = {n.name for n in plan.nodes}
    for n in obs.nodes:
        if n.name not in planned:
            continue
        what = {"podman": f"container {n.handle}", "redfish": f"BMC {n.handle}"}.get(n.driver, n.handle)
        if not n.exists:
            if n.driver == "redfish":
                out.append(Finding("nodes", n.name, "missing", f"{n.name}: {what} has no such system ({n.detail})",
                                   "check nodes[].provision.bmc (address, system_id) in the spec",
                                   "exists", "missing"))
            else:
                out.append(Finding("nodes", n.name, "missing", f"{n.name}: {what} does not exist",
                                   f"{fix.refresh} creates it again", "exists", "missing"))
            continue
        if n.power == "off":
            verb = "starts it" if n.driver == "podman" else "powers it on"
            state = f"{what} is not running ({n.detail})" if n.driver == "podman" else f"powered off ({what})"
            out.append(Finding("nodes", n.name, "powered_off", f"{n.name}: {state}", f"{fix.refresh} {verb}",
                               "on", n.power))
            continue
        if not n.reachable:
            how = {
                "podman": f"{what} is running but does not answer `podman exec`",
                "ssh": f"does not answer over ssh ({n.handle})",
                "redfish": f"{what} does not answer",
            }.get(n.driver, "does not answer")
            detail = f": {n.detail}" if n.detail and n.driver != "podman" else ""
            out.append(Finding("nodes", n.name, UNREACHABLE, f"{n.name}: {how}{detail}",
                               f"check the machine and its network; {fix.refresh} once it answers",
                               "reachable", "unreachable"))
            continue
        out += [f for u in n.services if (f := _unit_finding(n.name, u, fix)) is not None]
    return out


ENABLED = ("enabled", "enabled-runtime", "static", "generated", "indirect", "alias", "linked")


def _unit_finding(host: str, u: UnitState, fix: _Fix) -> Finding | None:
    wants = "running" if u.want == "active" else "enabled"
    observed = f"ActiveState={u.active} SubState={u.sub} UnitFileState={u.file_state} LoadState={u.load}"
    by_role = f"{fix.up} re-applies role {u.role}" if u.role else fix.up

    def finding(kind: str, message: str, hint: str) -> Finding:
        return Finding("nodes", host, kind, message, hint, u.want, observed, role=u.role, path=u.unit)

    if u.load == "not-found":
        return finding("unit_missing", f"{host}: {u.unit} does not exist, the plan has it {wants}",
                       by_role if u.role else f"{fix.up} installs it again")
    if u.load == "masked" or u.file_state.startswith("masked"):
        return finding("unit_masked", f"{host}: {u.unit} is masked, the plan has it {wants}",
                       f"`systemctl unmask {u.unit}` on {host}, then {by_role}")
    if u.want == "active" and u.active != "active":
        state = f"{u.active} ({u.sub})" if u.sub else u.active or "not running"
        said = f"; its journal ends: {u.log}" if u.log else ""
        return finding("unit_inactive", f"{host}: {u.unit} is {state}, the plan has it running{said}",
                       f"`systemctl start {u.unit}` on {host}, or {by_role}")
    if u.file_state not in ENABLED:
        return finding("unit_disabled",
                       f"{host}: {u.unit} is {u.file_state or 'not enabled'} at boot, the plan has it enabled",
                       f"`systemctl enable {u.unit}` on {host}, or {by_role}")
    return None


# --------------------------------------------------------------------------- files


def _service_message(c: FileChange) -> str:
    want = dict(x.split("=", 1) for x in c.expected if "=" in x)
    have = dict(x.split("=", 1) for x in c.observed if "=" in x)
    parts = []
    state = want.get("state")
    active = have.get("ActiveState")
    if state in ("started", "restarted", "reloaded") and active != "active":
        sub = f" ({have['SubState']})" if have.get("SubState") else ""
        parts.append(f"is {active or 'not running'}{sub}, the plan has it started")
    elif state == "stopped" and active == "active":
        parts.append("is running, the plan has it stopped")
    if want.get("enabled") in ("True", "true", "yes") and have.get("UnitFileState") not in (None, "enabled"):
        parts.append(f"is {have['UnitFileState']} at boot, the plan has it enabled")
    if not parts:
        parts.append(f"would change ({', '.join(c.expected) or 'no details'})")
    return f"{c.host}: service {c.path} " + "; ".join(parts)


def _file_finding(c: FileChange, fix: _Fix) -> Finding:
    f = fix.role(c.role)
    exp, obs = "\n".join(c.expected), "\n".join(c.observed)
    if c.change == "modified":
        msg = f"{c.host}: {c.path} differs from the plan ({_line_counts(c.plan_only, c.host_only)})"
        kind = "file_changed"
    elif c.change == "created":
        msg, kind = f"{c.host}: {c.path} is missing", "file_missing"
    elif c.change == "removed":
        msg, kind = f"{c.host}: {c.path} should not exist (the plan removes it)", "file_unexpected"
    elif c.change == "attributes":
        msg = f"{c.host}: {c.path} has {', '.join(c.observed) or '?'}, the plan has {', '.join(c.expected) or '?'}"
        kind = "file_attributes"
    elif c.change == "hidden":
        msg = f"{c.host}: role {c.role} would change a secret (task '{c.task}'; no_log hides what)"
        kind = "secret_changed"
    elif c.change == "service":
        msg, kind = _service_message(c), "service"
    elif c.change == "object_created":
        msg, kind = f"{c.host}: {c.path} is missing from the apiserver (role {c.role} creates it)", "object_missing"
    elif c.change == "object_modified":
        msg = (f"{c.host}: {c.path} on the apiserver differs from the plan "
               f"({_line_counts(c.plan_only, c.host_only)})")
        kind = "object_changed"
    else:
        detail = f": {c.observed[0]}" if c.observed else ""
        msg, kind = f"{c.host}: role {c.role} would make a change (task '{c.task}'){detail}", "task_changed"
    return Finding("files", c.host, kind, msg, f, exp, obs, role=c.role, path=c.path)


# A role's check that the release it installed is the spec's (cluster.versions): its name
# says so, e.g. slurm_compute's "Check the installed Slurm is the release the spec targets".
VERSION_CHECK = re.compile(r"^Check the installed .+ is the release the spec targets$")


def compare_files(obs: FilesObservation, fix: _Fix) -> tuple[list[Finding], list[CheckError]]:
    findings = [_file_finding(c, fix) for c in obs.changes]
    for u in obs.unreachable:
        findings.append(Finding("files", u.host, UNREACHABLE,
                                f"{u.host}: Ansible cannot reach it, so its files were not checked ({u.reason})",
                                f"bring it back ({fix.refresh}), then check again", "reachable", "unreachable"))
    errors = []
    for f in obs.failures:
        if VERSION_CHECK.match(f.task):  # the installed release is not the spec's: drift, named
            findings.append(Finding("files", f.host, "version_changed", f"{f.host}: {f.message}",
                                    "install the spec's release on the host, or change cluster.versions and "
                                    f"render again; then {fix.up}", "cluster.versions", "another release",
                                    role=f.role))
        else:
            errors.append(CheckError("files", f.host,
                                     f"{f.host}: role {f.role} failed in check mode at '{f.task}': {f.message}"))
    return findings, errors


# --------------------------------------------------------------------------- slurm


def _state_shown(node: SlurmNode) -> str:
    bad = [t for t in node.state_tokens if t in OUT_OF_SERVICE]
    return "+".join(bad)


def _node_state_finding(node: SlurmNode, ctl: str, fix: _Fix) -> Finding | None:
    shown = _state_shown(node)
    tokens = node.state_tokens
    if not shown and tokens and tokens[0] in IN_SERVICE:
        return None
    if not shown:
        shown = node.state or "no state"
    reason = f" (reason: '{node.reason}')" if node.reason else ""
    msg = f"{node.name} is {shown}{reason}"
    n = node.name
    if "NOT_RESPONDING" in tokens or "NO_RESPOND" in tokens:
        hint = (f"slurmd on {n} does not answer: `systemctl start slurmd` on {n} (or {fix.up}); "
                f"ReturnToService=2 then puts it back in service")
    elif "INVALID_REG" in tokens or "INVAL" in tokens:
        hint = (f"{n} registered with other hardware than slurm.conf says: make the spec's hardware "
                f"match the node (`slurmd -C` on {n}), {fix.up}, then "
                f"`scontrol update nodename={n} state=resume`")
    elif tokens and tokens[0] == "UNKNOWN" and not node.reason:
        hint = f"slurmd on {n} has not registered since slurmctld started: `systemctl status slurmd` on {n}"
    elif any(t.startswith("POWER") for t in tokens):
        hint = f"power saving has it down; `scontrol update nodename={n} state=power_up` to bring it back"
    else:
        hint = f"`scontrol update nodename={n} state=resume` when it may run jobs again"
    observed = node.state + (f" Reason={node.reason}" if node.reason else "")
    return Finding("slurm", n, "node_state", msg, hint, "in service (IDLE, MIXED or ALLOCATED)", observed)


def _hardware_findings(plan: Plan, node: SlurmNode, ctl: str, fix: _Fix) -> list[Finding]:
    s = plan.slurm
    assert s is not None
    line = next((ln for ln in s.nodes if node.name in expand(ln.hostlist)), None)
    if line is None:
        return []
    fields = (
        ("CPUTot", line.cpus, node.cpus),
        ("Sockets", line.sockets, node.sockets),
        ("CoresPerSocket", line.cores_per_socket, node.cores_per_socket),
        ("ThreadsPerCore", line.threads_per_core, node.threads_per_core),
        ("RealMemory", line.real_memory, node.real_memory),
        ("Gres", line.gres or "", node.gres),
    )
    out = []
    for key, want, have in fields:
        if have is None or want == have:
            continue
        out.append(Finding(
            "slurm", node.name, "node_config",
            f"{node.name}: Slurm has {key}={have or '(null)'}, the plan has {want or '(null)'}",
            _restore_conf(fix, "slurm.conf", ctl), f"{key}={want}", f"{key}={have}",
        ))
    return out


def _restore_conf(fix: _Fix, name: str, ctl: str) -> str:
    return (f"{fix.up} restores {name} on {ctl}; if the file already matches, "
            f"`systemctl restart slurmctld` on {ctl} loads it")


def _partition_findings(plan: Plan, obs: SlurmObservation, ctl: str, fix: _Fix) -> list[Finding]:
    s = plan.slurm
    assert s is not None
    out = []
    have = {p.name: p for p in obs.partitions}
    restore = _restore_conf(fix, "slurm.conf", ctl)
    for want in s.partitions:
        subject = f"partition/{want.name}"
        p = have.get(want.name)
        if p is None:
            out.append(Finding("slurm", subject, "partition_missing",
                               f"partition {want.name} is in the spec but not in Slurm", restore,
                               want.name, "missing"))
            continue
        planned_nodes = expand(want.hostlist)
        if set(planned_nodes) != set(p.nodes):
            out.append(Finding("slurm", subject, "partition_nodes",
                               f"partition {want.name} has nodes {want.hostlist} in the plan but "
                               f"{_hl(p.nodes)} in Slurm", restore, want.hostlist, _hl(p.nodes)))
        if p.default != want.default:
            w, h = ("YES" if want.default else "NO"), ("YES" if p.default else "NO")
            out.append(Finding("slurm", subject, "partition_config",
                               f"partition {want.name}: Default={h} in Slurm, the plan has Default={w}", restore,
                               f"Default={w}", f"Default={h}"))
        for key, w, h in (("MaxTime", want.max_time, p.max_time), ("DefaultTime", want.default_time, p.default_time)):
            if _times_differ(w, h):
                out.append(Finding("slurm", subject, "partition_config",
                                   f"partition {want.name}: {key}={h} in Slurm, the plan has {key}={w or 'NONE'}",
                                   restore, f"{key}={w or 'NONE'}", f"{key}={h}"))
        defaults = dict(p.job_defaults)
        for key, w in (("DefCpuPerGPU", want.def_cpu_per_gpu), ("DefMemPerGPU", want.def_mem_per_gpu)):
            h = defaults.get(key)
            if (str(w) if w else None) != h:
                out.append(Finding("slurm", subject, "partition_config",
                                   f"partition {want.name}: {key}={h or 'unset'} in Slurm, the plan has "
                                   f"{key}={w or 'unset'}", restore, f"{key}={w or 'unset'}",
                                   f"{key}={h or 'unset'}"))
        if p.state != "UP":
            out.append(Finding("slurm", subject, "partition_state",
                               f"partition {want.name} is {p.state}, the plan has it UP",
                               f"`scontrol update partitionname={want.name} state=up`", "UP", p.state))
    planned = {p.name for p in s.partitions}
    for p in obs.partitions:
        if p.name not in planned:
            out.append(Finding("slurm", f"partition/{p.name}", "partition_unexpected",
                               f"partition {p.name} is in Slurm but not in the spec",
                               f"remove it from slurm.conf on {ctl} ({fix.up} restores the rendered file), "
                               f"or add it to the spec", "absent", _hl(p.nodes)))
    return out


def _times_differ(want: str | None, have: str) -> bool:
    """``24:00:00`` and ``1-00:00:00`` are the same limit; INFINITE, UNLIMITED and NONE are none."""
    try:
        return time_seconds(want) != time_seconds(have)
    except ValueError:
        return (want or "NONE") != have


def _topology_findings(plan: Plan, obs: SlurmObservation, ctl: str, fix: _Fix) -> list[Finding]:
    s = plan.slurm
    assert s is not None
    restore = _restore_conf(fix, "topology.conf" if s.topology_format != "yaml" else "topology.yaml", ctl)
    out: list[Finding] = []
    use_switches = s.topology_format == "tree" or (s.topology_format == "yaml" and s.yaml_default == "fabric")
    use_blocks = s.topology_format == "block" or (s.topology_format == "yaml" and s.yaml_default == "nvlink")
    want_switches = list(s.switches) if use_switches else []
    want_blocks = list(s.blocks) if use_blocks else []
    if not want_switches and not want_blocks:
        if obs.switches or obs.blocks:
            n = len(obs.switches) + len(obs.blocks)
            out.append(Finding("slurm", "topology", "topology_unexpected",
                               f"topology: Slurm has a topology ({n} switches or blocks) but the plan has none",
                               restore, "none", f"{n} switches or blocks"))
        return out
    if want_switches and not obs.switches:
        out.append(Finding("slurm", "topology", "topology_missing",
                           f"topology: Slurm has no switches, the plan has {len(want_switches)} "
                           f"(TopologyPlugin={s.topology_plugin or 'topology/tree'})", restore,
                           f"{len(want_switches)} switches", "none"))
        return out
    if want_blocks and not obs.blocks:
        out.append(Finding("slurm", "topology", "topology_missing",
                           f"topology: Slurm has no blocks, the plan has {len(want_blocks)}", restore,
                           f"{len(want_blocks)} blocks", "none"))
        return out
    link = plan.fabric.link_speed.rstrip("G") if plan.fabric else ""
    have = {sw.name: sw for sw in obs.switches}
    for want in want_switches:
        sw = have.get(want.name)
        if sw is None:
            out.append(Finding("slurm", "topology", "switch_missing",
                               f"topology: switch {want.name} is in the plan but not in Slurm", restore,
                               want.name, "missing"))
            continue
        if want.nodes is not None and set(expand(want.nodes)) != set(sw.nodes):
            out.append(Finding("slurm", "topology", "switch_nodes",
                               f"topology: switch {want.name} has nodes {want.nodes} in the plan but "
                               f"{_hl(sw.nodes)} in Slurm", restore, want.nodes, _hl(sw.nodes)))
        want_children = expand(want.switches) if want.switches else []
        if set(want_children) != set(sw.switches):
            out.append(Finding("slurm", "topology", "switch_children",
                               f"topology: switch {want.name} has switches {_hl(want_children)} in the plan but "
                               f"{_hl(sw.switches)} in Slurm", restore, _hl(want_children), _hl(sw.switches)))
        if link and sw.link_speed and sw.link_speed != link:
            out.append(Finding("slurm", "topology", "switch_link_speed",
                               f"topology: switch {want.name} has LinkSpeed={link} in the plan but "
                               f"{sw.link_speed} in Slurm", restore, link, sw.link_speed))
    planned = {sw.name for sw in want_switches}
    for sw in obs.switches:
        if sw.name not in planned:
            out.append(Finding("slurm", "topology", "switch_unexpected",
                               f"topology: switch {sw.name} is in Slurm but not in the plan", restore,
                               "absent", _hl(sw.nodes or sw.switches)))
    have_blocks = {b.name: b for b in obs.blocks}
    for want in want_blocks:
        b = have_blocks.get(want.name)
        if b is None:
            out.append(Finding("slurm", "topology", "block_missing",
                               f"topology: block {want.name} is in the plan but not in Slurm", restore,
                               want.name, "missing"))
        elif set(expand(want.nodes)) != set(b.nodes):
            out.append(Finding("slurm", "topology", "block_nodes",
                               f"topology: block {want.name} has nodes {want.nodes} in the plan but "
                               f"{_hl(b.nodes)} in Slurm", restore, want.nodes, _hl(b.nodes)))
    planned_blocks = {b.name for b in want_blocks}
    for b in obs.blocks:
        if b.name not in planned_blocks:
            out.append(Finding("slurm", "topology", "block_unexpected",
                               f"topology: block {b.name} is in Slurm but not in the plan", restore,
                               "absent", _hl(b.nodes)))
    return out


def compare_slurm(plan: Plan, obs: SlurmObservation, fix: _Fix) -> list[Finding]:
    s = plan.slurm
    if s is None:
        return []
    ctl = obs.controller
    if obs.unreachable is not None:
        return [Finding("slurm", ctl, UNREACHABLE,
                        f"{ctl}: the Slurm controller does not answer, so Slurm was not checked "
                        f"({obs.unreachable.reason})",
                        f"bring it back ({fix.refresh}), then check again", "reachable", "unreachable")]
    if obs.failure:
        return [Finding("slurm", ctl, "controller_down", f"{ctl}: scontrol cannot get an answer from slurmctld "
                        f"({obs.failure})", f"`systemctl status slurmctld` on {ctl}; start it, or {fix.up}",
                        "slurmctld answering", obs.failure)]
    out: list[Finding] = []
    registered = {n.name: n for n in obs.nodes}
    for name in s.compute:
        node = registered.get(name)
        if node is None:
            out.append(Finding("slurm", name, "node_missing",
                               f"{name} is in the spec but not registered in Slurm",
                               _restore_conf(fix, "slurm.conf", ctl), "registered", "missing"))
            continue
        state = _node_state_finding(node, ctl, fix)
        if state is not None:
            out.append(state)
        out += _hardware_findings(plan, node, ctl, fix)
    planned = set(s.compute)
    spares = {n.name for n in plan.nodes if n.spare}
    for node in obs.nodes:
        if node.name in planned:
            continue
        if node.name in spares:
            out.append(Finding("slurm", node.name, SPARE_IN_SCHEDULER,
                               f"{node.name} is a spare in the spec but registered in Slurm",
                               f"remove it from slurm.conf on {ctl} ({fix.up} restores the rendered file), or "
                               "move it out of its spare group into a partition", "absent (spare)", node.state))
            continue
        if any(t.startswith("DYNAMIC") for t in node.state_tokens):
            hint = f"`scontrol delete nodename={node.name}` (a dynamic node), or add it to the spec"
        else:
            hint = (f"remove it from slurm.conf on {ctl} ({fix.up} restores the rendered file), "
                    f"or add it to the spec")
        out.append(Finding("slurm", node.name, "node_unexpected",
                           f"node {node.name} is registered in Slurm but not in the spec", hint,
                           "absent", node.state))
    out += _partition_findings(plan, obs, ctl, fix)
    out += _topology_findings(plan, obs, ctl, fix)
    return out


# --------------------------------------------------------------------------- kubernetes

_MISSING = object()


def subset_diff(want: Any, have: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where ``have`` differs from ``want``, looking only at what ``want`` sets.

    Dicts compare key by key (extra keys in ``have`` are the API server's: defaults,
    status); lists compare element by element and must have the same length; scalars
    compare by value, ``2`` and ``"2"`` being the same quantity.
    """
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return [(path, want, None if have is _MISSING else have)]
        out = []
        for key, value in want.items():
            out += subset_diff(value, have.get(key, _MISSING), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(want, (list, tuple)):
        if not isinstance(have, (list, tuple)) or len(have) != len(want):
            return [(path, want, None if have is _MISSING else have)]
        out = []
        for i, (w, h) in enumerate(zip(want, have)):
            out += subset_diff(w, h, f"{path}[{i}]")
        return out
    if have is _MISSING:
        return [(path, want, None)]
    if want == have or str(want) == str(have):
        return []
    return [(path, want, have)]


def _object_id(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace", "")), str(meta.get("name", ""))


def _object_name(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


# What a kubelet measures on its node. railyard sets the rest (extended resources such as
# nvidia.com/gpu), and all of it on a KWOK Node.
_MEASURED = frozenset({"cpu", "memory", "pods"})


def _capacity_findings(plan: Plan, obs: KubernetesObservation, fix: _Fix) -> list[Finding]:
    """Each registered worker's ``.status.capacity`` and ``.status.allocatable`` against the
    plan's capacity (the spec's hardware).

    What railyard sets (a KWOK Node's everything, a kubelet's GPUs) must be what the plan
    says, in both: a Node whose GPUs a kubelet restart zeroed offers Kueue and kube-scheduler
    none. What a kubelet measures must be at least the plan's capacity, the rule slurmd's
    registration follows too: a node with CPUs offline or a failed DIMM is short, one with
    more than the spec says is not drift (its allocatable is what it reserves less).
    """
    k = plan.kubernetes
    assert k is not None
    out: list[Finding] = []
    for name, want in sorted(k.capacity.items()):
        if name not in obs.labels:
            continue  # node_missing says it
        simulated = k.agents[name] == "kwok"
        for field, have in (("capacity", obs.capacity.get(name) or {}), ("allocatable", obs.allocatable.get(name) or {})):
            for resource, value in want.items():
                got = have.get(resource)
                w, h = quantity(value), quantity(got) if got is not None else None
                if resource in _MEASURED and not simulated:
                    if field == "capacity" and (h is None or h < w):
                        out.append(Finding("kubernetes", name, "capacity_short",
                                           f"{name} reports {resource} {got or 'none'}, less than the spec's {value}",
                                           f"check {name}'s hardware (CPUs offline, a failed DIMM), or correct its "
                                           "hardware in the spec", f"{resource}>={value}", f"{resource}={got}"))
                elif h is None or h != w:
                    out.append(Finding("kubernetes", name, "capacity_value",
                                       f"{name}: {field} {resource} is {got or 'missing'}, the plan has {value}",
                                       f"{fix.up} sets it", f"{field}.{resource}={value}", f"{field}.{resource}={got}"))
    return out


def _simulated(plan: Plan, name: str) -> bool:
    """A KWOK Node: no kubelet runs for it, and its ``.status.nodeInfo`` says whatever the
    Node object says (KWOK copies no running binary's version into it)."""
    k = plan.kubernetes
    return k is not None and k.agents.get(name) == "kwok"


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def _kubelet_release(plan: Plan) -> tuple[tuple[int, ...], str, str]:
    """(the release parts a kubelet must report, that release as text, where it comes from).

    The lab's kubelets are the build railyard makes (railyard/builds.py), so the whole
    release is pinned. Elsewhere the spec pins a minor (cluster.versions.kubernetes), which
    is what validate and roles/k8s_worker's own version check hold a node to: a patch
    release inside the minor is the site's to roll (and a kubelet binary the role did not
    install is the files layer's to find).
    """
    if plan.is_lab:
        return tuple(int(x) for x in builds.KUBERNETES.split(".")), f"v{builds.KUBERNETES}", \
            "the release railyard builds for the lab, railyard/builds.py"
    minor = plan.spec.cluster.versions.kubernetes
    return tuple(int(x) for x in minor.split(".")), f"v{minor}.x", "cluster.versions.kubernetes"


def _kubelet_moved(plan: Plan, reported: str) -> bool:
    want, _, _ = _kubelet_release(plan)
    m = _RELEASE.match(reported)
    if m is None:
        return True
    have = tuple(int(x) for x in m.groups() if x is not None)
    return have[: len(want)] != want


def _version_checks(plan: Plan, obs: KubernetesObservation,
                    fix: _Fix) -> tuple[list[Finding], list[CheckError], list[str]]:
    """Each registered worker's kubelet against the release railyard installs, and its
    container runtime against the one it ran when ``railyard up`` last finished
    (railyard.drift.applied says why a record and not the plan: Debian's containerd is not
    pinned). KWOK Nodes are left out, with a note."""
    k = plan.kubernetes
    assert k is not None
    findings: list[Finding] = []
    errors: list[CheckError] = []
    notes: list[str] = []
    registered = [n for n in k.workers if n in obs.labels]
    kwok = [n for n in registered if _simulated(plan, n)]
    if kwok:
        notes.append(f"kubernetes: kubelet and container runtime versions of {fold(kwok)} not compared: KWOK "
                     "Nodes (simulated) report what their Node object says, not a running kubelet's")
    real = [n for n in registered if n not in kwok]
    _, want, source = _kubelet_release(plan)
    unrecorded = []
    for name in real:
        have = obs.versions.get(name, NodeVersions())
        if not have.kubelet:
            errors.append(CheckError("kubernetes", name, f"{name}: the Node reports no kubelet version "
                                     "(.status.nodeInfo.kubeletVersion): not compared"))
        elif _kubelet_moved(plan, have.kubelet):
            if plan.is_lab:
                how = (f"{fix.up} re-applies role k8s_worker where the files layer finds {name}'s kubelet binary "
                       f"changed; if it already is {want}, `systemctl restart kubelet` on {name}")
            else:
                how = (f"install a {want} kubelet on {name} ({fix.up} re-applies role k8s_worker, which installs "
                       f"its pinned release), or set cluster.versions.kubernetes to the running minor and render "
                       "again")
            findings.append(Finding("kubernetes", name, "kubelet_version",
                                    f"{name}: kubelet {have.kubelet}, the plan has {want} ({source})", how,
                                    f"kubeletVersion={want}", f"kubeletVersion={have.kubelet}"))
        if obs.applied_runtimes is None:
            continue
        recorded = obs.applied_runtimes.get(name)
        if not have.runtime:
            errors.append(CheckError("kubernetes", name, f"{name}: the Node reports no container runtime version "
                                     "(.status.nodeInfo.containerRuntimeVersion): not compared"))
        elif recorded is None:
            unrecorded.append(name)
        elif have.runtime != recorded:
            runtime, _, version = recorded.partition("://")
            package = runtime if version else "the runtime"
            findings.append(Finding(
                "kubernetes", name, "runtime_version",
                f"{name}: container runtime {have.runtime}, {recorded} when `railyard up` last finished",
                f"meant (a Debian update)? {fix.up} records it as applied; if not, install {package} "
                f"{version or recorded} on {name} again (`apt-cache policy {package}` lists what apt has) and "
                f"`systemctl restart {package} kubelet` there",
                f"containerRuntimeVersion={recorded}", f"containerRuntimeVersion={have.runtime}"))
    if real and obs.applied_record and obs.applied_runtimes is None:
        notes.append(f"kubernetes: container runtime versions not compared: no record of the last `railyard up` "
                     f"on this machine ({obs.applied_record}); `railyard up` writes it")
    elif unrecorded:
        notes.append(f"kubernetes: container runtime of {fold(unrecorded)} not compared: not in the record of the "
                     f"last `railyard up` ({obs.applied_record}); the next `railyard up` records it")
    return findings, errors, notes


def _dns_checks(plan: Plan, obs: KubernetesObservation, fix: _Fix) -> tuple[list[Finding], list[str]]:
    """The cluster DNS runs: kube-system/coredns exists and at least one replica is
    available (roles/k8s_control_plane applies it; its pods run on the kubelet workers, so
    a partition of KWOK workers only has no cluster DNS to check). Fewer than it asks for,
    but some, is a note: the DNS still answers, and a worker restarting or a rollout
    passes through that state, which a drift check must not call drift."""
    k = plan.kubernetes
    assert k is not None
    if obs.dns is None or not any(a == "kubelet" for a in k.agents.values()):
        return [], []
    subject, dns = "kube-system/coredns", k.network.cluster_dns
    if not obs.dns.found:
        return [Finding("kubernetes", subject, "dns_missing",
                        f"{subject}: the cluster DNS Deployment is not there (nothing answers at {dns})",
                        f"{fix.up} re-applies role k8s_control_plane, which creates it", "Deployment", "absent")], []
    if obs.dns.available == 0 and obs.dns.desired > 0:
        return [Finding("kubernetes", subject, "dns_unavailable",
                        f"{subject}: 0 of {obs.dns.desired} replicas available: the cluster DNS at {dns} does not "
                        "answer", "`kubectl -n kube-system describe pods -l k8s-app=kube-dns` says why (image, node, "
                        "readiness); the kubelet workers must run and reach the apiserver's Service",
                        f"{obs.dns.desired} available", "0 available")], []
    if obs.dns.available < obs.dns.desired:
        note = (f"kubernetes: {subject} has {obs.dns.available} of {obs.dns.desired} replicas available "
                f"(the cluster DNS at {dns} answers, with less to spare)")
        return [], [note]
    return [], []


def _member_id(member: EtcdMember) -> str:
    """The ID as etcdctl prints and takes it (hex)."""
    return format(int(member.id), "x") if member.id.isdigit() else member.id


def _etcd_checks(plan: Plan, etcd: EtcdObservation, fix: _Fix) -> tuple[list[Finding], list[CheckError]]:
    """etcd's members against the plan's control-plane nodes, as sets: each control-plane
    node runs one member named after it (roles/k8s_control_plane: ETCD_NAME is the
    inventory hostname), no other member is there, and each answers healthy on its /health."""
    k = plan.kubernetes
    assert k is not None
    host = etcd.host
    if etcd.unreadable:
        return [], [CheckError("kubernetes", host, f"{host}: etcd's members not checked: {etcd.unreadable}")]
    if etcd.failure:
        todo = (f"the etcd CA and the health check client certificate on {host} are the ones roles/k8s_control_plane "
                f"writes (/etc/kubernetes/pki/etcd): {fix.up} writes them again; `journalctl -u etcd` on {host} says "
                "what etcd refused" if etcd.tls else
                f"`systemctl status etcd` and `journalctl -u etcd` on {host}; start it, or {fix.up}")
        return [Finding("kubernetes", host, "etcd_down",
                        f"{host}: etcd does not answer on {etcd.endpoint or 'its client URL'} ({etcd.failure})",
                        todo, "etcd answering", etcd.failure)], []
    out: list[Finding] = []
    named = {m.name: m for m in etcd.members if m.name}
    listed = ", ".join(sorted(m.name or f"{_member_id(m)} (unstarted)" for m in etcd.members)) or "none"
    for name in k.control_plane:
        if name not in named:
            out.append(Finding(
                "kubernetes", name, "etcd_member_missing",
                f"{name}: etcd has no member named {name} (members: {listed})",
                f"{fix.up} restores {name}'s /etc/default/etcd (ETCD_NAME={name}) and restarts etcd; a member "
                f"removed from a cluster of several is added back first (`etcdctl member add {name} "
                f"--peer-urls=<its peer URL>`) and then started with an empty data directory",
                f"member {name}", listed))
    for m in etcd.members:
        peers = ",".join(m.peer_urls) or "no peer URL"
        if not m.name:
            out.append(Finding(
                "kubernetes", f"etcd/{_member_id(m)}", "etcd_member_unstarted",
                f"etcd member {_member_id(m)} ({peers}) was added but has never started",
                f"start etcd on the node at {peers} with ETCD_INITIAL_CLUSTER_STATE=existing, or "
                f"`etcdctl member remove {_member_id(m)}` if it is not meant to join", "started", "unstarted"))
            continue
        if m.name not in k.control_plane:
            out.append(Finding(
                "kubernetes", f"etcd/{m.name}", "etcd_member_unexpected",
                f"etcd member {m.name} ({peers}) is not a control-plane node of the spec",
                f"`etcdctl member remove {_member_id(m)}`, or add {m.name} to partitions.kubernetes.control_plane",
                "absent", f"member {m.name}"))
        if m.learner:
            out.append(Finding(
                "kubernetes", m.name, "etcd_member_learner",
                f"{m.name}: etcd member {m.name} is a learner (it does not vote)",
                f"`etcdctl member promote {_member_id(m)}` once it has caught up", "voting member", "learner"))
        if m.healthy is False:
            out.append(Finding(
                "kubernetes", m.name, "etcd_member_unhealthy",
                f"{m.name}: etcd member {m.name} is not healthy ({m.health})",
                f"`journalctl -u etcd` on {m.name}; `systemctl restart etcd` there, or {fix.up}",
                "health=true", m.health))
    return out, []


def _control_plane_note(obs: KubernetesObservation) -> list[str]:
    """Which control-plane node answered, when one before it in the spec did not. A note,
    not a finding: the cluster answered, and a node that does not answer is the nodes
    layer's finding (unreachable), which says more about it than this layer can."""
    if not obs.unanswered:
        return []
    missed = ", ".join(f"{u.host} ({u.reason})" for u in obs.unanswered)
    nodes = "node" if len(obs.unanswered) == 1 else "nodes"
    return [f"kubernetes: read through {obs.host}: control-plane {nodes} {missed} did not answer"]


def compare_kubernetes(plan: Plan, obs: KubernetesObservation,
                       fix: _Fix) -> tuple[list[Finding], list[CheckError], list[str]]:
    """Findings, check errors (an observation that cannot be read) and notes (what is
    not compared, and why)."""
    k = plan.kubernetes
    if k is None:
        return [], [], []
    asked = _control_plane_note(obs)
    if not obs.deployed:
        return [], [], asked
    out: list[Finding] = []
    # Workers must be registered; a control-plane node may be (kubeadm runs a kubelet
    # there, roles/k8s_control_plane does not).
    expected_nodes = list(k.workers)
    for name in expected_nodes:
        if name not in obs.labels:
            out.append(Finding("kubernetes", name, "node_missing",
                               f"{name} is in the spec but not registered in Kubernetes",
                               f"`systemctl status {k.agents[name]}` on {name}, or {fix.up}", "registered", "missing"))
    for name, want in sorted(k.labels.items()):
        have = obs.labels.get(name)
        if have is None:
            continue
        for key, value in want.items():
            if key not in have:
                out.append(Finding("kubernetes", name, "label_missing",
                                   f"{name}: label {key} is missing (the plan has '{value}')",
                                   f"`kubectl label node {name} {key}={value}`, or {fix.up}", f"{key}={value}",
                                   "missing"))
            elif have[key] != value:
                out.append(Finding("kubernetes", name, "label_value",
                                   f"{name}: label {key} is '{have[key]}', the plan has '{value}'",
                                   f"`kubectl label --overwrite node {name} {key}={value}`, or {fix.up}",
                                   f"{key}={value}", f"{key}={have[key]}"))
    out += _capacity_findings(plan, obs, fix)
    spares = {n.name for n in plan.nodes if n.spare}
    for name in obs.labels:
        if name in spares:
            out.append(Finding("kubernetes", name, SPARE_IN_SCHEDULER,
                               f"{name} is a spare in the spec but registered in Kubernetes",
                               f"`kubectl delete node {name}` and stop its kubelet, or move it out of its spare "
                               "group into partitions.kubernetes.workers", "absent (spare)", "registered"))
            continue
        if name not in expected_nodes and name not in k.control_plane:
            out.append(Finding("kubernetes", name, "node_unexpected",
                               f"node {name} is registered in Kubernetes but not in the spec",
                               f"`kubectl delete node {name}`, or add it to the spec", "absent", "registered"))
    have_objects = {_object_id(o): o for o in obs.objects}
    for want in (*k.kueue, *k.volcano):
        oid = _object_id(want)
        subject = _object_name(*oid)
        got = have_objects.get(oid)
        if got is None:
            out.append(Finding("kubernetes", subject, "object_missing", f"{subject} is in the plan but not in the cluster",
                               f"{fix.up} creates it", "present", "missing"))
            continue
        # .spec, or an object's top-level fields where it has none (a priority class's value)
        body = {key: v for key, v in want.items() if key not in ("apiVersion", "kind", "metadata")}
        for path, w, h in subset_diff(body, got):
            out.append(Finding("kubernetes", subject, "object_field",
                               f"{subject}: {path} is {h!r} in the cluster, the plan has {w!r}",
                               f"{fix.up} restores it", repr(w), repr(h)))
    dns_findings, dns_notes = _dns_checks(plan, obs, fix)
    out += dns_findings
    findings, errors, notes = _version_checks(plan, obs, fix)
    notes = asked + dns_notes + notes
    out += findings
    if obs.etcd is not None:
        f, e = _etcd_checks(plan, obs.etcd, fix)
        out += f
        errors += e
    return out, errors, notes


# --------------------------------------------------------------------------- all


def compare(plan: Plan, observed: Observed, *, stack: str | None = None) -> DriftReport:
    """Everything that differs between the plan and what was observed, sorted."""
    fix = _Fix(plan, stack)
    findings: list[Finding] = []
    errors = list(observed.errors)
    notes = list(observed.notes)
    if observed.nodes is not None:
        findings += compare_nodes(plan, observed.nodes, fix)
    if observed.files is not None:
        f, e = compare_files(observed.files, fix)
        findings += f
        errors += e
    if observed.slurm is not None:
        findings += compare_slurm(plan, observed.slurm, fix)
    if observed.kubernetes is not None:
        if plan.kubernetes is not None and not observed.kubernetes.deployed:
            notes.append(f"kubernetes: not checked: {observed.kubernetes.reason or 'partition not deployed'}")
        f, e, n = compare_kubernetes(plan, observed.kubernetes, fix)
        findings += f
        errors += e
        notes += n
    spares = [n.name for n in plan.nodes if n.spare]
    if spares:
        notes.append(f"spares: {fold(spares)} (spare: true) are in no scheduler: checked as nodes and for "
                     "their files, not for Slurm or Kubernetes roles")
    layers = set(observed.layers) | {e.layer for e in observed.errors}
    return DriftReport(plan.name, tuple(layers), tuple(findings), tuple(errors), tuple(notes))

"""The files layer, pure half: the check-mode playbooks, and ansible-runner events -> changes.

The collector runs every planned role with ``--check --diff`` through ansible-runner, one
play per role over the same inventory group the Pulumi Playbook resource uses, with the
same variables at the same precedence (extravars), all plays in one ansible-playbook (one
start-up, one inventory parse, one connection per host for the whole check). Each play has
``ignore_errors: true`` so a role that fails in check mode on a host does not hide the rest
of the run; the failure is reported, and whatever that role did after it on that host is
not (it ran on a broken premise). A result belongs to the role of its play, also when an
included role's task produced it (kueue applies its objects with k8s_control_plane's
``objects.yml``): re-running that play's role is what restores it.

Each changed task result becomes one :class:`FileChange` per host and path: what kind of
change (a file that differs, is missing, should not be there, has other attributes; a
service that would be started; a secret that would change; an API object that
``kubectl diff`` says the role's apply would create or change), with the diff's line
counts and a few of the differing lines, never the whole diff. Handlers are consequences of
other changes, not drift: their results are ignored (ansible-runner marks a handler's
``playbook_on_task_start`` with ``is_conditional: true``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from railyard.apply.playbooks import STRATEGY
from railyard.drift.observed import FileChange, TaskFailure, Unreachable

SAMPLE_LINES = 3
SAMPLE_WIDTH = 120
MESSAGE_WIDTH = 400  # Ansible's error messages put the cause at the end
SERVICE_MODULES = ("systemd", "systemd_service", "service", "sysvinit")
PLAY_PREFIX = "railyard: "


def check_playbook(plays: Iterable[tuple[str, str]]) -> str:
    """One play per (role, inventory pattern), in order, as the Playbook resources run them
    (no implicit facts: each role gathers what it needs; the deploy's strategy). Check mode
    is CPU-bound: on the lab (14 roles, 10 containers, 2 cores) one ansible-playbook per
    role took 240 s, one playbook 185 s, one playbook with Mitogen 101 s. JSON is YAML."""
    out = [
        {"name": f"{PLAY_PREFIX}{role}", "hosts": group, "gather_facts": False, "strategy": STRATEGY,
         "roles": [role], "ignore_errors": True}
        for role, group in plays
    ]
    return json.dumps(out, indent=1) + "\n"


@dataclass(frozen=True)
class EventSummary:
    changes: tuple[FileChange, ...]
    failures: tuple[TaskFailure, ...]
    unreachable: tuple[Unreachable, ...]
    seen: tuple[str, ...]  # hosts that reported at least one task result
    finished: bool  # the run reached its recap (playbook_on_stats)


def _clip(line: str, width: int = SAMPLE_WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def line_diff(before: str, after: str) -> tuple[int, int, tuple[str, ...], tuple[str, ...]]:
    """(plan-only count, host-only count, sample of plan lines, sample of host lines).

    ``before`` is the host's file, ``after`` what the role would write: the plan.
    """
    plan_only: list[str] = []
    host_only: list[str] = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("+"):
            plan_only.append(line[1:])
        elif line.startswith("-"):
            host_only.append(line[1:])
    return (
        len(plan_only),
        len(host_only),
        tuple(_clip(x) for x in plan_only[:SAMPLE_LINES]),
        tuple(_clip(x) for x in host_only[:SAMPLE_LINES]),
    )


def _module(data: dict[str, Any]) -> str:
    return str(data.get("resolved_action") or data.get("task_action") or "")


def _role(data: dict[str, Any]) -> str:
    """The role of the result's play, else (a play railyard did not write) the task's."""
    play = str(data.get("play") or "")
    if play.startswith(PLAY_PREFIX):
        return play.removeprefix(PLAY_PREFIX)
    return str(data.get("role") or "")


def _path(res: dict[str, Any], diff: dict[str, Any] | None) -> str:
    args = (res.get("invocation") or {}).get("module_args") or {}
    for value in (res.get("dest"), res.get("path"), args.get("dest"), args.get("path")):
        if value:
            return str(value)
    if diff is not None:
        for key in ("before_header", "after_header"):
            header = diff.get(key)
            if isinstance(header, str) and header:
                return header.removesuffix(" (content)")
    return str(args.get("name") or res.get("name") or "")


def _diffs(res: dict[str, Any]) -> list[dict[str, Any]]:
    diff = res.get("diff")
    if isinstance(diff, dict):
        return [diff]
    if isinstance(diff, list):
        return [d for d in diff if isinstance(d, dict)]
    return []


def _attrs(before: dict[str, Any], after: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    keys = [k for k in after if k != "path" and before.get(k) != after.get(k)]
    keys += [k for k in before if k != "path" and k not in after and k not in keys]
    return (
        tuple(f"{k}={after[k]}" for k in keys if k in after),
        tuple(f"{k}={before[k]}" for k in keys if k in before),
    )


def _changes_of(host: str, role: str, task: str, module: str, res: dict[str, Any]) -> list[FileChange]:
    short = module.rsplit(".", 1)[-1]
    if "censored" in res:
        return [FileChange(host, role, task, "hidden", module=module)]
    if short in SERVICE_MODULES:
        args = (res.get("invocation") or {}).get("module_args") or {}
        status = res.get("status") or {}
        name = str(res.get("name") or args.get("name") or "")
        wants = [f"{k}={args[k]}" for k in ("state", "enabled") if args.get(k) is not None]
        actual = [f"{k}={status[k]}" for k in ("ActiveState", "SubState", "UnitFileState") if status.get(k)]
        return [FileChange(host, role, task, "service", path=name, expected=tuple(wants),
                           observed=tuple(actual), module=module)]
    diffs = _diffs(res)
    out: list[FileChange] = []
    for d in diffs:
        before, after = d.get("before"), d.get("after")
        path = _path(res, d)
        if isinstance(before, dict) and isinstance(after, dict):
            b_state, a_state = before.get("state"), after.get("state")
            if a_state == "absent" and b_state not in (None, "absent"):
                out.append(FileChange(host, role, task, "removed", path, observed=(f"state={b_state}",),
                                      module=module))
            elif b_state == "absent" and a_state not in (None, "absent"):
                out.append(FileChange(host, role, task, "created", path, expected=(f"state={a_state}",),
                                      module=module))
            else:
                expected, observed = _attrs(before, after)
                if expected or observed:
                    out.append(FileChange(host, role, task, "attributes", path, expected=expected,
                                          observed=observed, module=module))
        elif isinstance(before, str) and isinstance(after, str):
            if before == "" and not d.get("before_header"):
                # The whole file is missing: its first lines (the generated header) say nothing.
                plan_only = len(after.splitlines())
                out.append(FileChange(host, role, task, "created", path, plan_only=plan_only, module=module))
            elif before != after:
                plan_only, host_only, exp, obs = line_diff(before, after)
                out.append(FileChange(host, role, task, "modified", path, plan_only, host_only, exp, obs,
                                      module=module))
        elif d.get("prepared"):  # apt and friends: "The following NEW packages will be installed"
            lines = [ln.strip() for ln in str(d["prepared"]).splitlines() if ln.strip()]
            out.append(FileChange(host, role, task, "task", path="", observed=tuple(_clip(x) for x in
                                                                                     lines[:SAMPLE_LINES]),
                                  module=module))
    if not out and short == "command" and "/LIVE-" in str(res.get("stdout") or ""):
        out = kubectl_diff_changes(host, role, task, module, str(res["stdout"]))
    if not out:
        msg = str(res.get("msg") or "").strip()
        out.append(FileChange(host, role, task, "task", path=_path(res, None) if diffs else "",
                              observed=(_clip(msg.splitlines()[0]),) if msg else (), module=module))
    return out


# `kubectl diff` runs `diff -u -N LIVE/<obj> MERGED/<obj>` per object that would change;
# <obj> is [group.]version.Kind.namespace.name (kubectl's InfoObject.Name).
_KUBECTL_DIFF = re.compile(r"^diff -u -N \S*/LIVE-[^/\s]+/(?P<obj>\S+) \S*/MERGED-[^/\s]+/\S+$")
_OBJECT = re.compile(r"^(?:[a-z0-9.-]+\.)?v\d+(?:(?:alpha|beta)\d+)?\.(?P<kind>[A-Z]\w*)\.(?P<ns>[^.]*)\.(?P<name>.+)$")
# What the apiserver changes on every write, not what railyard sets.
_SERVER_LINE = re.compile(r"^  (generation|resourceVersion): ")


def kubectl_object(name: str) -> str:
    """``topology.volcano.sh.v1alpha1.HyperNode..su2`` -> ``HyperNode/su2`` (namespaced: Kind/ns/name)."""
    m = _OBJECT.match(name)
    if m is None:
        return name
    return "/".join(x for x in (m["kind"], m["ns"], m["name"]) if x)


def kubectl_diff_changes(host: str, role: str, task: str, module: str, stdout: str) -> list[FileChange]:
    """``kubectl diff`` output (the objects.yml check of k8s_control_plane, which kueue,
    volcano and k8s_worker include) -> one change per object the apply would touch.

    LIVE is the apiserver's object, MERGED the plan's applied to it: ``+`` lines are the
    plan's, ``-`` lines the server's; an object LIVE lacks entirely is one to create.
    """
    objects: list[tuple[str, list[str]]] = []
    for line in stdout.splitlines():
        m = _KUBECTL_DIFF.match(line)
        if m is not None:
            objects.append((kubectl_object(m["obj"]), []))
        elif objects:
            objects[-1][1].append(line)
    out: list[FileChange] = []
    for path, lines in objects:
        hunks = [ln for ln in lines if not ln.startswith(("---", "+++", "@@"))]
        created = any(ln.startswith("@@ -0,0 ") for ln in lines)
        plan = [ln[1:] for ln in hunks if ln.startswith("+") and not _SERVER_LINE.match(ln[1:])]
        host_side = [ln[1:] for ln in hunks if ln.startswith("-") and not _SERVER_LINE.match(ln[1:])]
        if not created and not plan and not host_side:
            continue  # only the server's own counters would move
        out.append(FileChange(host, role, task, "object_created" if created else "object_modified", path,
                              len(plan), len(host_side),
                              () if created else tuple(_clip(x.strip()) for x in plan[:SAMPLE_LINES]),
                              tuple(_clip(x.strip()) for x in host_side[:SAMPLE_LINES]), module=module))
    return out


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return _clip(lines[0], MESSAGE_WIDTH) if lines else ""


def _failure_message(res: dict[str, Any]) -> str:
    return (_first_line(res.get("msg")) or _first_line(res.get("stderr")) or _first_line(res.get("reason"))
            or "failed without a message")


def unreachable_reason(res: dict[str, Any]) -> str:
    """Ansible's first sentence, plus the connection's exit status when it gave one.

    A deleted lab container reads "Failed to create temporary directory. In some cases,
    ... exited with result 125": the first sentence and "exited with result 125" are the
    parts that say what happened.
    """
    text = " ".join(str(res.get("msg") or "").split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".") if text else "unreachable"
    status = re.search(r"exited with result \d+", text)
    if status and status.group(0) not in first:
        first = f"{first}; {status.group(0)}"
    return _clip(first)


def summarize_events(events: Iterable[dict[str, Any]]) -> EventSummary:
    """Changes, failures and unreachable hosts from one check-mode run's events, in order."""
    changes: list[FileChange] = []
    failures: list[TaskFailure] = []
    unreachable: dict[str, Unreachable] = {}
    seen: dict[str, None] = {}
    broken: set[tuple[str, str]] = set()  # (host, role) after a failure in that role
    # Handler results are known by their task's uuid (ansible-runner gives every result
    # one), never by "the last task start was a handler": under the free strategy one
    # host's handler starts while another host's tasks still report (slurmd stopped on
    # gpu002 went unseen while gpu001 restarted its slurmd).
    handlers: set[str] = set()
    finished = False
    for event in events:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            # ansible-runner sends handlers as playbook_on_task_start with is_conditional=true
            handler = kind == "playbook_on_handler_task_start" or data.get("is_conditional") is True
            if handler and data.get("task_uuid"):
                handlers.add(str(data["task_uuid"]))
            continue
        if kind == "playbook_on_stats":
            finished = True
            continue
        if not kind.startswith("runner_"):
            continue
        host = str(data.get("host") or "")
        if not host or kind in ("runner_on_start", "runner_on_file_diff"):
            continue
        seen.setdefault(host, None)
        res = data.get("res") or {}
        role, task, module = _role(data), str(data.get("task") or ""), _module(data)
        if kind == "runner_on_unreachable":
            unreachable.setdefault(host, Unreachable(host, unreachable_reason(res)))
            continue
        if str(data.get("task_uuid")) in handlers or (host, role) in broken:
            continue
        if kind in ("runner_on_failed", "runner_item_on_failed"):
            failures.append(TaskFailure(host, role, task, _failure_message(res)))
            broken.add((host, role))
            continue
        if kind not in ("runner_on_ok", "runner_item_on_ok"):
            continue  # skipped, retries, async polls
        if "results" in res:
            continue  # a loop's summary: its items came as runner_item_on_ok
        if "censored" in res:
            # no_log hides `changed` too; the callback's line still says it, after the
            # task banner the free strategy prints with a task's first result
            changed = any(line.startswith("changed:") for line in str(event.get("stdout") or "").splitlines())
        else:
            changed = bool(res.get("changed"))
        if changed:
            changes.extend(_changes_of(host, role, task, module, res))
    return EventSummary(tuple(changes), tuple(failures), tuple(unreachable.values()), tuple(seen), finished)

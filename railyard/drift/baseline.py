"""The files layer's fast path: one probe per host, against what the last clean check saw.

Running every planned role in Ansible check mode costs about 0.13 s per host and task on
2 cores: 70-110 s for the lab, and about 16 s more per compute node. Most checks find
nothing, because nothing a role manages moved since the last check that found nothing.

So a clean (role, host) of a check-mode run leaves a *baseline*: the fingerprint of what
the role manages on that host, taken by one probe right after the run, under a key made
of the role's plan digest (its files, the rendered artifacts it reads, its hosts'
variables, ansible.cfg: what re-runs it in ``railyard up``) and a digest of its secrets.
The next check probes every host once. A pair whose key is the plan's and whose
fingerprint is the baseline's is clean without Ansible; every other pair (no baseline,
another plan, anything moved, the probe failed) runs in check mode, which names what
changed. The baseline only ever says "nothing moved since check mode proved this pair
matches the plan"; it is never a source of expected content, and it lives on the
machine that runs the check (mode 0600), not on the nodes.

A fingerprint holds, for one (role, host), what the probe reads where the role's results
said it acted or looked (a delegated task's on the host it ran on):

* every path the role's tasks wrote (copy, template, file, blockinfile, ...) or read to
  decide whether to write (find, stat, slurp: the roles probe first and skip a write that
  would change nothing, so in a clean run the read is often the only result naming the
  path): type, mode, owner, group and the SHA-1 of a regular file's bytes, or ``absent``;
* every user and group it made; every unit it started or enabled (ActiveState, SubState,
  UnitFileState, NeedDaemonReload);
* every read-only command the check ran (``check_mode: false``: ``kubectl diff`` of the
  objects a role applies, the Node capacity read, package queries), re-run by the probe:
  exit status and the SHA-1 of its output. This is how API objects are covered;
* the host's installed package set (name, version, status).

A pair is always checked in check mode when the probe cannot stand in for one of its
results: a module it does not know, a command it cannot re-run as it ran (stdin, chdir),
a hidden (``no_log``) result in a role that does not list the paths its hidden tasks
write (``meta/railyard.yml``: ``drift.hidden_paths``), or a path it cannot read (a
non-root ssh user and a 0400 file).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Modules whose result names a path the role manages (``path`` or ``dest``).
PATH_MODULES = frozenset({
    "copy", "template", "file", "blockinfile", "lineinfile", "replace", "get_url", "unarchive",
    "openssl_privatekey", "openssl_csr", "openssl_publickey", "x509_certificate", "munge_key",
})
READ_MODULES = frozenset({"find", "stat", "slurp"})  # what the role compared before writing
ACCOUNT_MODULES = frozenset({"user", "group"})
SERVICE_MODULES = frozenset({"systemd", "systemd_service", "service"})
COMMAND_MODULES = frozenset({"command", "shell"})
# Results that read or derive, and change nothing the probe would have to see: checks of
# variables, includes, a certificate signed in memory from inputs the role read (slurp),
# apt (the package set is in every fingerprint).
DERIVED_MODULES = frozenset({
    "assert", "debug", "set_fact", "fail", "meta", "validate_argument_spec", "include_role", "include_tasks",
    "import_tasks", "import_role", "include_vars", "x509_certificate_pipe", "apt",
})
VERSION = 3

# Runs on the node (python3 is there: Ansible needs it). argv[1] is a JSON list of items:
# "/path", "user:<name>", "group:<name>", "unit:<name>", "cmd:<JSON argv>". Prints one JSON
# object: {"items": {item: text}, "packages": SHA-1 of the installed package set}.
PROBE = r"""
import grp, hashlib, json, os, pwd, stat, subprocess, sys
items = json.loads(sys.argv[1])
def name(db, i):
    try:
        return db(i)[0]
    except KeyError:
        return str(i)
def path(p):
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return "unreadable: %s" % e.strerror
    kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    head = "%s %04o %s %s" % (kind, stat.S_IMODE(st.st_mode), name(pwd.getpwuid, st.st_uid), name(grp.getgrgid, st.st_gid))
    if kind == "file":
        try:
            with open(p, "rb") as f:
                return head + " " + hashlib.sha1(f.read()).hexdigest()
        except OSError as e:
            return "unreadable: %s" % e.strerror
    if kind == "link":
        return head + " -> " + os.readlink(p)
    return head
def account(kind, who):
    try:
        e = pwd.getpwnam(who) if kind == "user" else grp.getgrnam(who)
    except KeyError:
        return "absent"
    return " ".join(str(x) for x in (e[2:] if kind == "user" else (e[2], ",".join(sorted(e[3])))))
def command(argv):
    try:
        p = subprocess.run(argv, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unreadable: %s" % e
    return "rc=%d %s" % (p.returncode, hashlib.sha1(p.stdout).hexdigest())
out = {}
units = [i[5:] for i in items if i.startswith("unit:")]
if units:
    shown = subprocess.run(["systemctl", "show", "-p", "Id,ActiveState,SubState,UnitFileState,NeedDaemonReload"]
                           + units, capture_output=True, text=True).stdout
    blocks = [dict(l.split("=", 1) for l in b.splitlines() if "=" in l) for b in shown.strip().split("\n\n")]
    for u, props in zip(units, blocks + [{}] * len(units)):
        out["unit:" + u] = " ".join(props.get(k, "?") for k in ("ActiveState", "SubState", "UnitFileState", "NeedDaemonReload"))
for i in items:
    if i.startswith("/"):
        out[i] = path(i)
    elif i.startswith(("user:", "group:")):
        out[i] = account(*i.split(":", 1))
    elif i.startswith("cmd:"):
        out[i] = command(json.loads(i[4:]))
try:
    pk = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n"],
                        capture_output=True).stdout
except FileNotFoundError:
    pk = b"no dpkg"
print(json.dumps({"items": out, "packages": hashlib.sha1(pk).hexdigest()}))
"""


def probe_argv(items: Iterable[str]) -> list[str]:
    return ["python3", "-c", PROBE, json.dumps(sorted(set(items)), separators=(",", ":"))]


Read = tuple[str, str]  # (host the probe runs on, item)


@dataclass(frozen=True)
class Targets:
    """What one role's run on one host read and wrote, where to probe it, and why it may not
    have a baseline. A delegated task's items are probed on the host it ran on."""

    reads: tuple[Read, ...] = ()
    uncacheable: str = ""  # why this pair always runs in check mode ("" when it need not)
    checksums: tuple[tuple[str, str, str], ...] = ()  # (host, path, SHA-1) the check's results reported

    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h for h, _ in self.reads))

    def agrees(self, fp: Mapping[str, Any]) -> bool:
        """The probe after the check saw the bytes the check saw (nothing moved in between)."""
        items = fp.get("items") or {}
        return all(str(items.get(f"{h}|{p}", "")).split(" ")[-1] == sha for h, p, sha in self.checksums)


def _short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


# A task delegated to the machine that runs Ansible (the roles find their binaries and
# packages there): the probe runs here too.
CONTROLLER = "localhost"


def _where(data: Mapping[str, Any], res: Mapping[str, Any], by_address: Mapping[str, str]) -> str | None:
    """The inventory host a result's action ran on: the delegate's, else the result's own."""
    delegated = res.get("_ansible_delegated_vars")
    if isinstance(delegated, Mapping) and delegated.get("ansible_host"):
        if delegated.get("ansible_connection") == "local" or delegated["ansible_host"] in ("localhost", "127.0.0.1"):
            return CONTROLLER
        return by_address.get(str(delegated["ansible_host"]))  # None: a host railyard does not know
    return str(data.get("host") or "")


def _command_item(module: str, res: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """A read-only command the check ran (check_mode: false), as the probe re-runs it; None
    when it cannot be re-run as it was (standard input, another directory, a shell string)."""
    if args.get("stdin") or args.get("chdir") or args.get("creates") or args.get("removes"):
        return None
    cmd = res.get("cmd")
    if module == "shell" and isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    elif isinstance(cmd, list) and all(isinstance(a, str) for a in cmd):
        argv = cmd
    else:
        return None
    return "cmd:" + json.dumps(argv, separators=(",", ":"))


def targets_of(events: Iterable[dict[str, Any]], play_prefix: str, by_address: Mapping[str, str] | None = None,
               hidden_paths: Mapping[str, tuple[str, ...]] | None = None) -> dict[tuple[str, str], Targets]:
    """(role, host) -> what the role's results on the host read and wrote, and where.

    Only results of plays railyard wrote (``play_prefix`` + role) count. ``by_address``
    maps a delegate's ``ansible_host`` back to its inventory name. A result the probe
    cannot stand in for makes its pair uncacheable: a module it does not know, a command
    it cannot re-run as it ran, a delegate it cannot name, or a hidden (``no_log``) result
    in a role that does not list the paths its hidden tasks write (``hidden_paths``: role
    -> paths, from the role's ``meta/railyard.yml``).
    """
    by_address = by_address or {}
    hidden_paths = hidden_paths or {}
    reads: dict[tuple[str, str], dict[Read, None]] = {}
    sums: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
    why: dict[tuple[str, str], str] = {}
    for event in events:
        if event.get("event") not in ("runner_on_ok", "runner_item_on_ok", "runner_on_failed",
                                      "runner_item_on_failed"):
            continue
        data = event.get("event_data") or {}
        play, host = str(data.get("play") or ""), str(data.get("host") or "")
        if not play.startswith(play_prefix) or not host:
            continue
        role = play.removeprefix(play_prefix)
        key = (role, host)
        mine = reads.setdefault(key, {})
        res = data.get("res") or {}
        if "results" in res:
            continue  # a loop's summary: its items came on their own
        task = str(data.get("task") or "")
        if "censored" in res:
            if role in hidden_paths:
                mine.update({(host, p): None for p in hidden_paths[role]})
            else:
                why.setdefault(key, f"task {task!r} hides its result (no_log)")
            continue
        where = _where(data, res, by_address)
        if where is None:
            why.setdefault(key, f"task {task!r} ran on a delegate railyard cannot name")
            continue
        module = _short(str(data.get("resolved_action") or data.get("task_action") or ""))
        args = (res.get("invocation") or {}).get("module_args") or {}
        if module in PATH_MODULES:
            for value in (res.get("dest"), res.get("path"), args.get("dest"), args.get("path")):
                if isinstance(value, str) and value.startswith("/"):
                    mine[(where, value)] = None
                    if isinstance(res.get("checksum"), str) and res.get("state", "file") == "file":
                        sums.setdefault(key, {})[(where, value)] = res["checksum"]
                    break
        elif module in READ_MODULES:
            # the roles' "probe, then act only on what differs" reads: the files they find
            # are the ones whose write the role then skips
            found = [f.get("path") for f in res.get("files") or [] if isinstance(f, dict)]
            found += [args.get("path"), args.get("src") if module == "slurp" else None]
            mine.update({(where, v): None for v in found if isinstance(v, str) and v.startswith("/")})
        elif module in ACCOUNT_MODULES:
            name = res.get("name") or args.get("name")
            if isinstance(name, str) and name:
                mine[(where, f"{module}:{name}")] = None
        elif module in SERVICE_MODULES:
            name = res.get("name") or args.get("name")
            if isinstance(name, str) and name:
                mine[(where, f"unit:{name if '.' in name else name + '.service'}")] = None
        elif module in COMMAND_MODULES:
            item = _command_item(module, res, args)
            if item is None:
                why.setdefault(key, f"task {task!r}: a command the probe cannot re-run as it ran")
            else:
                mine[(where, item)] = None
        elif module not in DERIVED_MODULES:
            why.setdefault(key, f"task {task!r}: module {module} is not one the probe can stand in for")
    return {k: Targets(tuple(reads[k]), why.get(k, ""),
                       tuple(sorted((h, p, c) for (h, p), c in sums.get(k, {}).items()))) for k in reads}


def key_of(digest: str, secrets: Mapping[str, str]) -> str:
    """A pair's baseline key: the role's plan digest and (hashed) the secrets it is given."""
    h = hashlib.sha256(f"v{VERSION}\0{digest}\0".encode())
    for name in sorted(secrets):
        h.update(name.encode() + b"\0" + hashlib.sha256(secrets[name].encode()).digest())
    return h.hexdigest()


def fingerprint(targets: Targets, probes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """This pair's part of the hosts' probe outputs (host -> output); None when a probe is
    missing or could not read an item."""
    items: dict[str, str] = {}
    packages: dict[str, str] = {}
    for host, item in targets.reads:
        probe = probes.get(host)
        if probe is None:
            return None
        text = (probe.get("items") or {}).get(item)
        if text is None or str(text).startswith("unreadable"):
            return None
        items[f"{host}|{item}"] = str(text)
        packages[host] = str(probe.get("packages"))
    return {"items": items, "packages": packages}


def hidden_paths(root: Path, role: str, variables: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The paths a role's hidden (``no_log``) tasks write, from ``meta/railyard.yml``'s
    ``drift.hidden_paths`` (role variable names), resolved through ``variables`` and then
    the role's defaults; None when the role lists none or one does not resolve to a path."""
    from railyard.apply import roles

    names = (roles.facts(root, role).get("drift") or {}).get("hidden_paths")
    if not isinstance(names, list) or not names:
        return None
    out = []
    for name in names:
        value = variables.get(name, roles.defaults(root, role).get(name))
        if not isinstance(value, str) or not value.startswith("/") or "{{" in value:
            return None
        out.append(value)
    return tuple(out)


@dataclass
class Store:
    """Baselines of one cluster on this machine: ``{role: {host: {key, reads, fingerprint}}}``."""

    path: Path
    pairs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Store:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path)
        if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("pairs"), dict):
            return cls(path)
        return cls(path, doc["pairs"])

    def get(self, role: str, host: str, key: str) -> dict[str, Any] | None:
        entry = (self.pairs.get(role) or {}).get(host)
        return entry if isinstance(entry, dict) and entry.get("key") == key else None

    def put(self, role: str, host: str, key: str, targets: Targets, print_: dict[str, Any]) -> None:
        self.pairs.setdefault(role, {})[host] = {
            "key": key, "reads": [list(r) for r in targets.reads], "fingerprint": print_}

    def drop(self, role: str, host: str) -> None:
        (self.pairs.get(role) or {}).pop(host, None)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"version": VERSION, "pairs": self.pairs}, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

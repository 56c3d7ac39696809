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

A fingerprint holds, for one (role, host):

* every path the role's tasks named (copy, template, file, blockinfile, lineinfile,
  get_url, ...) or read to decide whether to write (find, stat, slurp: the roles probe
  first and skip a write that would change nothing, so in a clean run the read is often
  the only result naming the path): type, mode, owner, group and the SHA-1 of a regular file's bytes, or
  ``absent``;
* every user and group its tasks made: uid, gid, home, shell / gid, members;
* every unit its tasks started or enabled: ActiveState, SubState, UnitFileState,
  NeedDaemonReload;
* the host's installed package set (name, version, status), shared by its roles.

Not every pair can have one. A pair is always checked in check mode when its run hid a
result (``no_log``: the munge key), when the role's state is partly API objects (its step
says so: the probe reads the host, not the apiserver), or when the probe cannot read a
path (a non-root ssh user and a 0400 file).
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
    "openssl_privatekey", "openssl_csr", "openssl_publickey", "x509_certificate",
})
SERVICE_MODULES = frozenset({"systemd", "systemd_service", "service"})
READ_MODULES = frozenset({"find", "stat", "slurp"})  # what the role compared before writing
ACCOUNT_MODULES = frozenset({"user", "group"})  # fingerprinted as "user:<name>", "group:<name>"
VERSION = 2

# Runs on the node (python3 is there: Ansible needs it). argv[1]: {"paths": [...], "units": [...]}.
# Prints one JSON object: {"files": {path: str}, "units": {unit: str}, "packages": sha1}.
PROBE = r"""
import grp, hashlib, json, os, pwd, stat, subprocess, sys
want = json.loads(sys.argv[1])
def name(db, i):
    try:
        return db(i)[0]
    except KeyError:
        return str(i)
files = {}
for p in want["paths"]:
    if p.startswith(("user:", "group:")):
        kind, _, who = p.partition(":")
        try:
            e = pwd.getpwnam(who) if kind == "user" else grp.getgrnam(who)
            files[p] = " ".join(str(x) for x in (e[2:] if kind == "user" else (e[2], ",".join(sorted(e[3])))))
        except KeyError:
            files[p] = "absent"
        continue
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        files[p] = "absent"
        continue
    except OSError as e:
        files[p] = "unreadable: %s" % e.strerror
        continue
    kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    head = "%s %04o %s %s" % (kind, stat.S_IMODE(st.st_mode), name(pwd.getpwuid, st.st_uid), name(grp.getgrgid, st.st_gid))
    if kind == "file":
        try:
            with open(p, "rb") as f:
                head += " " + hashlib.sha1(f.read()).hexdigest()
        except OSError as e:
            files[p] = "unreadable: %s" % e.strerror
            continue
    elif kind == "link":
        head += " -> " + os.readlink(p)
    files[p] = head
units = {}
if want["units"]:
    out = subprocess.run(["systemctl", "show", "-p", "Id,ActiveState,SubState,UnitFileState,NeedDaemonReload"]
                         + want["units"], capture_output=True, text=True).stdout
    shown = [dict(l.split("=", 1) for l in b.splitlines() if "=" in l) for b in out.strip().split("\n\n")]
    for u, props in zip(want["units"], shown + [{}] * len(want["units"])):
        units[u] = " ".join(props.get(k, "?") for k in ("ActiveState", "SubState", "UnitFileState", "NeedDaemonReload"))
try:
    pk = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n"],
                        capture_output=True, text=True).stdout
except FileNotFoundError:
    pk = "no dpkg"
print(json.dumps({"files": files, "units": units, "packages": hashlib.sha1(pk.encode()).hexdigest()}))
"""


def probe_argv(paths: Iterable[str], units: Iterable[str]) -> list[str]:
    want = {"paths": sorted(set(paths)), "units": sorted(set(units))}
    return ["python3", "-c", PROBE, json.dumps(want, separators=(",", ":"))]


@dataclass(frozen=True)
class Targets:
    """What one role's run named on one host, and why it may not have a baseline."""

    paths: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    uncacheable: str = ""  # why this pair always runs in check mode ("" when it need not)
    checksums: tuple[tuple[str, str], ...] = ()  # (path, SHA-1) the check's results reported

    def agrees(self, fp: Mapping[str, Any]) -> bool:
        """The probe after the check saw the bytes the check saw (nothing moved in between)."""
        files = fp.get("files") or {}
        return all(str(files.get(p, "")).split(" ")[-1] == sha for p, sha in self.checksums)


def _short(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def targets_of(events: Iterable[dict[str, Any]], play_prefix: str) -> dict[tuple[str, str], Targets]:
    """(role, host) -> the paths and units the role's results named on the host.

    Only results of plays railyard wrote (``play_prefix`` + role) count; a censored result
    (``no_log``) makes its pair uncacheable, since what it wrote cannot be named.
    """
    paths: dict[tuple[str, str], dict[str, None]] = {}
    units: dict[tuple[str, str], dict[str, None]] = {}
    sums: dict[tuple[str, str], dict[str, str]] = {}
    hidden: dict[tuple[str, str], str] = {}
    for event in events:
        if event.get("event") not in ("runner_on_ok", "runner_item_on_ok", "runner_on_failed",
                                      "runner_item_on_failed"):
            continue
        data = event.get("event_data") or {}
        play, host = str(data.get("play") or ""), str(data.get("host") or "")
        if not play.startswith(play_prefix) or not host:
            continue
        key = (play.removeprefix(play_prefix), host)
        paths.setdefault(key, {})
        units.setdefault(key, {})
        res = data.get("res") or {}
        if "results" in res:
            continue  # a loop's summary: its items came on their own
        if "censored" in res:
            hidden.setdefault(key, f"task {data.get('task')!r} hides its result (no_log)")
            continue
        module = _short(str(data.get("resolved_action") or data.get("task_action") or ""))
        args = (res.get("invocation") or {}).get("module_args") or {}
        if module in PATH_MODULES:
            for value in (res.get("dest"), res.get("path"), args.get("dest"), args.get("path")):
                if isinstance(value, str) and value.startswith("/"):
                    paths[key][value] = None
                    if isinstance(res.get("checksum"), str) and res.get("state", "file") == "file":
                        sums.setdefault(key, {})[value] = res["checksum"]
                    break
        elif module in READ_MODULES:
            # the roles' "probe, then act only on what differs" reads: the files they find
            # are the ones whose write the role then skips
            found = [f.get("path") for f in res.get("files") or [] if isinstance(f, dict)]
            found += [args.get("path"), args.get("src") if module == "slurp" else None]
            for value in found:
                if isinstance(value, str) and value.startswith("/"):
                    paths[key][value] = None
        elif module in ACCOUNT_MODULES:
            name = res.get("name") or args.get("name")
            if isinstance(name, str) and name:
                paths[key][f"{module}:{name}"] = None
        elif module in SERVICE_MODULES:
            name = res.get("name") or args.get("name")
            if isinstance(name, str) and name:
                units[key][name if "." in name else f"{name}.service"] = None
    return {k: Targets(tuple(paths[k]), tuple(units[k]), hidden.get(k, ""), tuple(sorted(sums.get(k, {}).items())))
            for k in paths}


def key_of(digest: str, secrets: Mapping[str, str]) -> str:
    """A pair's baseline key: the role's plan digest and (hashed) the secrets it is given."""
    h = hashlib.sha256(f"v{VERSION}\0{digest}\0".encode())
    for name in sorted(secrets):
        h.update(name.encode() + b"\0" + hashlib.sha256(secrets[name].encode()).digest())
    return h.hexdigest()


def fingerprint(targets: Targets, probe: Mapping[str, Any]) -> dict[str, Any] | None:
    """This pair's part of a host's probe output; None when the probe could not see it all."""
    files = probe.get("files") or {}
    unit_states = probe.get("units") or {}
    if any(p not in files or str(files[p]).startswith("unreadable") for p in targets.paths):
        return None
    if any(u not in unit_states for u in targets.units):
        return None
    return {
        "files": {p: files[p] for p in targets.paths},
        "units": {u: unit_states[u] for u in targets.units},
        "packages": probe.get("packages"),
    }


@dataclass
class Store:
    """Baselines of one cluster on this machine: ``{role: {host: {key, targets, fingerprint}}}``."""

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
            "key": key, "paths": list(targets.paths), "units": list(targets.units), "fingerprint": print_}

    def drop(self, role: str, host: str) -> None:
        (self.pairs.get(role) or {}).pop(host, None)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"version": VERSION, "pairs": self.pairs}, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

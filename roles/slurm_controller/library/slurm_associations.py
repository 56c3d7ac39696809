#!/usr/bin/python
"""Keep slurmdbd's QOS, accounts and users as the spec has them, with sacctmgr."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_associations
short_description: Make slurmdbd's QOS, account tree and user associations equal a desired state
description:
  - Reads the cluster's associations with C(sacctmgr show), compares them with O(state)
    (railyard renders it to accounting/associations.json) and runs only the sacctmgr commands
    that close the difference; a second run changes nothing.
  - The desired state is the whole truth for the cluster. Accounts, user associations and
    users it does not list are removed (root excepted), QOS too (normal excepted).
    sacctmgr refuses to remove a user or account that has running jobs; the module then
    fails naming them, and nothing after that point is applied.
  - Check mode reports the differences as a diff (one line per QOS, account and user
    association) and runs nothing that writes.
options:
  state:
    description: Desired state, {cluster, qos, accounts, users} (railyard.compiler.accounting).
    type: dict
    required: true
  sacctmgr:
    description: sacctmgr binary.
    type: str
    default: sacctmgr
  tres_timeout:
    description:
      - Seconds to wait for every TRES the limits name to be known to slurmdbd; slurmctld
        registers them (AccountingStorageTRES) when it starts.
    type: int
    default: 60
author: railyard
"""

EXAMPLES = r"""
- name: Apply the spec's associations
  slurm_associations:
    state: "{{ lookup('ansible.builtin.file', 'associations.json') | from_json }}"
"""

RETURN = r"""
commands:
  description: The sacctmgr commands run (or, in check mode, that would run).
  returned: always
  type: list
"""

import re
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

# sacctmgr `set` option -> the `show ... format=` column that prints it
QOS_COLUMNS = {
    "Priority": "Priority",
    "GrpTRES": "GrpTRES",
    "MaxTRESPerUser": "MaxTRESPU",
    "MaxTRESPerJob": "MaxTRES",
    "MaxJobsPerUser": "MaxJobsPU",
    "MaxSubmitJobsPerUser": "MaxSubmitPU",
    "MaxWall": "MaxWall",
}
ASSOC_COLUMNS = {
    "Fairshare": "Fairshare",
    "GrpTRES": "GrpTRES",
    "MaxTRES": "MaxTRES",
    "MaxJobs": "MaxJobs",
    "QOS": "QOS",
    "DefaultQOS": "DefaultQOS",
}
TRES_OPTIONS = {"GrpTRES", "MaxTRES", "MaxTRESPerUser", "MaxTRESPerJob"}
# What sacctmgr shows for a record it has just added: only what differs is then set.
NEW_QOS = {"Priority": "0"}
NEW_ASSOC = {"Fairshare": "1"}
BATCH = 100  # names per sacctmgr command
# Options an association inherits from its parent when the spec leaves them empty
INHERITED = {"QOS", "DefaultQOS"}
KEEP_ACCOUNTS = {"root"}
KEEP_USERS = {"root"}
KEEP_QOS = {"normal"}
_MEM = re.compile(r"^(\d+)([KMGTP]?)$")
_UNITS = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


class SacctmgrError(Exception):
    pass


def tres_map(text: str) -> dict[str, str]:
    """'cpu=4,gres/gpu=2,mem=1G' -> {cpu: 4, gres/gpu: 2, mem: 1024} (mem in MB)."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, _, value = part.partition("=")
        m = _MEM.fullmatch(value)
        if name == "mem" and m:
            value = str(int(int(m.group(1)) * _UNITS[m.group(2)]))
        out[name] = value
    return out


def normal(option: str, value: str) -> object:
    """One spelling for what sacctmgr prints and what the spec gives."""
    value = (value or "").strip()
    if option in TRES_OPTIONS:
        return tuple(sorted(tres_map(value).items()))
    if option == "QOS":
        return tuple(sorted(filter(None, value.split(","))))
    if option == "MaxWall":
        return _minutes(value)
    return value


def _minutes(text: str) -> str:
    """Slurm times ('1-00:00:00', '60', '2:00:00') -> minutes, so equal limits compare equal."""
    if not text or text.upper() in ("INFINITE", "UNLIMITED"):
        return ""  # no limit, however it is spelled
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hms = parts + [0] * (3 - len(parts))  # d-h, d-h:m, d-h:m:s
        h, m, s = hms[:3]
    elif len(parts) == 1:
        return str(parts[0])
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = parts
    return str(int(days or 0) * 1440 + h * 60 + m + (1 if s else 0))


def clear(option: str, value: str, before: str) -> str:
    """The value to `set`: an unset limit is cleared with -1 (each TRES of a TRES limit)."""
    if value != "":
        return value
    if option in TRES_OPTIONS:
        return ",".join(f"{name}=-1" for name in tres_map(before)) or "-1"
    return "-1"


def _batches(names: list[str]) -> list[str]:
    return [",".join(names[i:i + BATCH]) for i in range(0, len(names), BATCH)]


def line(kind: str, name: str, options: dict[str, str]) -> str:
    shown = " ".join(f"{k}={v}" for k, v in sorted(options.items()) if v != "")
    return f"{kind} {name}" + (f" {shown}" if shown else "")


class Sacctmgr:
    def __init__(self, binary: str, run=subprocess.run):
        self.binary = binary
        self._run = run

    def show(self, what: str, columns: list[str], where: list[str] = ()) -> list[dict[str, str]]:
        argv = [self.binary, "--noheader", "--parsable2", "show", what, *where, "format=" + ",".join(columns)]
        proc = self._run(argv, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise SacctmgrError(f"`{' '.join(argv)}` failed: {(proc.stderr or proc.stdout).strip()}")
        return [dict(zip(columns, ln.split("|"))) for ln in proc.stdout.splitlines() if ln.strip()]

    def do(self, args: list[str]) -> None:
        argv = [self.binary, "--immediate", *args]
        proc = self._run(argv, capture_output=True, text=True, timeout=120, check=False)
        out = (proc.stdout + proc.stderr).strip()
        # sacctmgr says "Nothing new added." / "Nothing modified" with rc 1 for a no-op
        if proc.returncode != 0 and "Nothing" not in out:
            raise SacctmgrError(f"`{' '.join(argv)}` failed: {out}")
        if "Job(s) active" in out or "cancel job(s)" in out.lower():
            raise SacctmgrError(f"`{' '.join(argv)}` refused: {out}")


def observe(s: Sacctmgr, cluster: str) -> dict:
    clusters = [r["Cluster"] for r in s.show("cluster", ["Cluster"])]
    qos = {r["Name"]: {opt: r[col] for opt, col in QOS_COLUMNS.items()}
           for r in s.show("qos", ["Name", *QOS_COLUMNS.values()])}
    cols = ["Account", "User", "ParentName", *ASSOC_COLUMNS.values()]
    rows = s.show("association", cols, ["where", f"cluster={cluster}"]) if cluster in clusters else []
    accounts, user_assocs = {}, {}
    for r in rows:
        opts = {opt: r[col] for opt, col in ASSOC_COLUMNS.items()}
        if r["User"]:
            user_assocs[(r["User"], r["Account"])] = opts
        else:
            accounts[r["Account"]] = {"parent": r["ParentName"], "options": opts}
    # a user's default account is theirs (all clusters), shown by `show user`
    defaults = {r["User"]: r["DefaultAccount"] for r in s.show("user", ["User", "DefaultAccount"]) if r["User"]}
    return {"registered": cluster in clusters, "qos": qos, "accounts": accounts, "user_assocs": user_assocs,
            "defaults": defaults}


def named_tres(want: dict) -> set[str]:
    """Every TRES a limit of the desired state names (gres/gpu, cpu, ...)."""
    limits = [o for o in want["qos"].values()]
    limits += [a["options"] for a in want["accounts"]]
    limits += [opts for u in want["users"] for opts in u["accounts"].values()]
    return {name for opts in limits for option, value in opts.items() if option in TRES_OPTIONS
            for name in tres_map(value)}


def known_tres(s: Sacctmgr) -> set[str]:
    """slurmdbd's TRES as limits name them: cpu, mem, gres/gpu, gres/gpu:h100 ..."""
    return {f"{r['Type']}/{r['Name']}" if r["Name"] else r["Type"] for r in s.show("tres", ["Type", "Name"])}


def plan(want: dict, have: dict) -> tuple[list[list[str]], list[str], list[str]]:
    """(sacctmgr commands in a safe order, before lines, after lines)."""
    cluster = want["cluster"]
    cmds: list[list[str]] = []
    before: list[str] = []
    after: list[str] = []
    if not have["registered"]:
        cmds.append(["add", "cluster", cluster])
        before.append(f"cluster {cluster} not registered")
        after.append(f"cluster {cluster}")

    def differing(options: dict[str, str], current: dict[str, str]) -> dict[str, str]:
        return {o: clear(o, v, current.get(o, "")) for o, v in options.items()
                if not (o in INHERITED and v == "") and normal(o, v) != normal(o, current.get(o, ""))}

    # QOS first: accounts name them
    for name, options in want["qos"].items():
        current = have["qos"].get(name)
        if current is None:
            cmds.append(["add", "qos", name])
            current = dict(NEW_QOS)
            before.append(f"qos {name} absent")
        diff = differing(options, current)
        if diff:
            cmds.append(["modify", "qos", "where", f"name={name}", "set", *(f"{k}={v}" for k, v in diff.items())])
            if name in have["qos"]:
                before.append(line("qos", name, {k: current.get(k, "") for k in options}))
        if diff or name not in have["qos"]:
            after.append(line("qos", name, options))

    wanted_accounts = {a["name"]: a for a in want["accounts"]}
    for a in want["accounts"]:
        name, current = a["name"], have["accounts"].get(a["name"])
        if current is None:
            cmds.append(["add", "account", name, f"cluster={cluster}", f"parent={a['parent']}"])
            current = {"parent": a["parent"], "options": dict(NEW_ASSOC)}
            before.append(f"account {name} absent")
        elif current["parent"] != a["parent"]:
            cmds.append(["modify", "account", "where", f"name={name}", f"cluster={cluster}", "set",
                         f"parent={a['parent']}"])
        diff = differing(a["options"], current["options"])
        if diff:
            cmds.append(["modify", "account", "where", f"name={name}", f"cluster={cluster}", "set",
                         *(f"{k}={v}" for k, v in diff.items())])
        if diff or current["parent"] != a["parent"] or name not in have["accounts"]:
            if name in have["accounts"]:
                before.append(line("account", name, {"parent": current["parent"],
                                                     **{k: current["options"].get(k, "") for k in a["options"]}}))
            after.append(line("account", name, {"parent": a["parent"], **a["options"]}))

    # Users in batches: one sacctmgr command per account and option set, not per user
    # (sacctmgr takes a list of names), so 500 users cost tens of commands.
    wanted_assocs = {(u["name"], acct): opts for u in want["users"] for acct, opts in u["accounts"].items()}
    adds: dict[tuple[str, bool], list[str]] = {}
    mods: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    new_defaults: dict[str, list[str]] = {}
    for u in want["users"]:
        for acct, options in u["accounts"].items():
            key = (u["name"], acct)
            current = have["user_assocs"].get(key)
            if current is None:
                first = u["name"] not in have["defaults"] and acct == u["default_account"]
                adds.setdefault((acct, first), []).append(u["name"])
                current = dict(NEW_ASSOC)
                before.append(f"user {u['name']} account={acct} absent")
            diff = differing(options, current)
            if diff:
                mods.setdefault((acct, tuple(diff.items())), []).append(u["name"])
            if diff or key not in have["user_assocs"]:
                if key in have["user_assocs"]:
                    before.append(line("user", f"{u['name']} account={acct}",
                                       {k: current.get(k, "") for k in options}))
                after.append(line("user", f"{u['name']} account={acct}", options))
        if u["name"] in have["defaults"] and have["defaults"][u["name"]] != u["default_account"]:
            new_defaults.setdefault(u["default_account"], []).append(u["name"])
            before.append(f"user {u['name']} default_account={have['defaults'][u['name']]}")
            after.append(f"user {u['name']} default_account={u['default_account']}")
    for (acct, first), names in adds.items():
        for batch in _batches(names):
            cmds.append(["add", "user", batch, f"account={acct}", f"cluster={cluster}",
                         *([f"defaultaccount={acct}"] if first else [])])
    for (acct, diff), names in mods.items():
        for batch in _batches(names):
            cmds.append(["modify", "user", "where", f"name={batch}", f"account={acct}", f"cluster={cluster}",
                         "set", *(f"{k}={v}" for k, v in diff)])
    for acct, names in new_defaults.items():
        for batch in _batches(names):
            cmds.append(["modify", "user", "where", f"name={batch}", "set", f"defaultaccount={acct}"])

    # Removals last, deepest first: user associations, then accounts (children before
    # parents), then QOS no account names any more.
    wanted_users = {u["name"] for u in want["users"]}
    gone = sorted({u for u, _ in have["user_assocs"]} - wanted_users - KEEP_USERS)
    for user in gone:
        cmds.append(["delete", "user", "where", f"name={user}", f"cluster={cluster}"])
        before.append(f"user {user} (not in the spec)")
    for (user, acct) in sorted(have["user_assocs"]):
        if user in KEEP_USERS or user in gone or (user, acct) in wanted_assocs:
            continue
        cmds.append(["delete", "user", "where", f"name={user}", f"account={acct}", f"cluster={cluster}"])
        before.append(line("user", f"{user} account={acct}", {}) + " (not in the spec)")
    depth = {}
    for name in have["accounts"]:
        d, cur = 0, name
        while cur in have["accounts"] and cur != "root" and d < 100:
            cur, d = have["accounts"][cur]["parent"], d + 1
        depth[name] = d
    for name in sorted(have["accounts"], key=lambda n: (-depth[n], n)):
        if name in KEEP_ACCOUNTS or name in wanted_accounts:
            continue
        cmds.append(["delete", "account", "where", f"name={name}", f"cluster={cluster}"])
        before.append(f"account {name} (not in the spec)")
    for name in sorted(have["qos"]):
        if name in KEEP_QOS or name in want["qos"]:
            continue
        cmds.append(["delete", "qos", "where", f"name={name}"])
        before.append(f"qos {name} (not in the spec)")
    return cmds, before, after


def main() -> None:
    module = AnsibleModule(
        argument_spec={"state": {"type": "dict", "required": True},
                       "sacctmgr": {"type": "str", "default": "sacctmgr"},
                       "tres_timeout": {"type": "int", "default": 60}},
        supports_check_mode=True,
    )
    want = module.params["state"]
    s = Sacctmgr(module.params["sacctmgr"])
    try:
        deadline = time.monotonic() + module.params["tres_timeout"]
        while (missing := named_tres(want) - known_tres(s)) and not module.check_mode:
            if time.monotonic() > deadline:
                module.fail_json(msg=f"slurmdbd knows no TRES {', '.join(sorted(missing))} after "
                                     f"{module.params['tres_timeout']} s: slurmctld registers the TRES of "
                                     "AccountingStorageTRES when it starts; is it running with that slurm.conf?")
            time.sleep(2)
        have = observe(s, want["cluster"])
    except SacctmgrError as exc:
        if module.check_mode:  # a drift check: what cannot be read differs, and says why
            module.exit_json(changed=True, commands=[], msg=f"slurmdbd does not answer, so its associations "
                             f"cannot be compared with the spec: {exc}")
        module.fail_json(msg=f"slurmdbd does not answer: {exc}")
    try:
        cmds, before, after = plan(want, have)
        if cmds and not module.check_mode:
            for args in cmds:
                s.do(args)
    except SacctmgrError as exc:
        msg = str(exc)
        if "Job(s) active" in msg or "cancel job" in msg.lower():
            msg = ("sacctmgr refused to remove an account or user that has running jobs, as it should: "
                   f"{msg}. Let the jobs end (or scancel them), or keep it in partitions.slurm.accounting "
                   "until they have; nothing after this command was applied")
        module.fail_json(msg=msg)
    diff = {"before_header": f"slurmdbd associations of cluster {want['cluster']}", "after_header": "the spec",
            "before": "\n".join(before) + ("\n" if before else ""),
            "after": "\n".join(after) + ("\n" if after else "")}
    module.exit_json(changed=bool(cmds), commands=[" ".join(c) for c in cmds], diff=diff)


if __name__ == "__main__":
    main()

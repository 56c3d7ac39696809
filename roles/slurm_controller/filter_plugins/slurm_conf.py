"""slurm.conf parsing and the restart-or-reconfigure rule, as pure functions.

The rule comes from Slurm 22.05's own documentation (Debian 12 ships 22.05.8):

* scontrol(1), ``reconfigure``: "Most configuration parameters can be changed by just
  running this command; however, there are parameters that require a restart of the
  relevant Slurm daemons. Parameters requiring a restart will be noted in the slurm.conf(5)
  man page. The slurmctld daemon and all slurmd daemons must also be restarted if nodes
  are added to or removed from the cluster."
* slurm.conf(5), NODE CONFIGURATION: "Changes in node configuration (e.g. adding nodes,
  changing their processor count, etc.) require restarting both the slurmctld daemon and
  the slurmd daemons."
* slurm.conf(5) says "A restart of slurmctld is required" (or "All Slurm daemons ...
  must be restarted") for the keys in :data:`RESTART_KEYS`; AuthType needs every daemon
  stopped and restarted.  Plugin selections (``*Type``, ``*Plugin``) are loaded once at
  start-up, so any plugin change restarts as well (TopologyPlugin included).
* ``SlurmctldParameters=enable_configless`` and ``SchedulerParameters=
  no_backup_scheduling`` need a restart; other tokens of those keys do not.

Other files: topology.conf (and gres.conf) are re-read on ``scontrol reconfigure`` -- in
22.05 ``read_slurm_conf()`` (src/slurmctld/read_config.c) calls
``slurm_topo_build_config()`` on every reconfiguration and slurmd's ``_reconfigure()``
rebuilds its topology too -- so they never force a restart by themselves.

Partition lines: the brief for railyard treats a change of a partition's node set (or a
partition added/removed) as a restart, other partition attributes as reconfigure.
"""

from __future__ import annotations

import re
from typing import Any

NONE, RECONFIGURE, RESTART = "none", "reconfigure", "restart"

# Lower-cased keys whose change slurm.conf(5) 22.05 marks as needing a restart.
RESTART_KEYS = frozenset(
    k.lower()
    for k in (
        "AccountingStorageEnforce",
        "AuthAltParameters",
        "AuthAltTypes",
        "AuthInfo",
        "AuthType",
        "BackupAddr",
        "BackupController",
        "ClusterName",
        "CommunicationParameters",
        "ControlAddr",
        "ControlMachine",
        "CoreSpecPlugin",
        "CredType",
        "GresTypes",
        "JobContainerType",
        "MaxJobCount",
        "MaxNodeCount",
        "PluginDir",
        "PowerPlugin",
        "ProctrackType",
        "SchedulerType",
        "SelectType",
        "SelectTypeParameters",
        "SlurmctldHost",
        "SlurmctldPidFile",
        "SlurmctldPort",
        "SlurmdPort",
        "SlurmUser",
        "StateSaveLocation",
        "SwitchType",
        "TopologyPlugin",
    )
)
RESTART_SUFFIXES = ("type", "plugin", "plugins")
RESTART_TOKENS = {"slurmctldparameters": {"enable_configless"}, "schedulerparameters": {"no_backup_scheduling"}}
_RECORD_KEYS = ("nodename", "partitionname", "nodeset", "frontendname", "downnodes")
_PAIR = re.compile(r"(\S+?)=(\"[^\"]*\"|\S*)")


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip()


def parse_slurm_conf(text: str) -> dict[str, Any]:
    """Global keys (lower-cased) -> value, and record lines by kind -> name -> attributes.

    Keys are case-insensitive in slurm.conf; node and partition names are not.
    """
    keys: dict[str, str] = {}
    records: dict[str, dict[str, dict[str, str]]] = {k: {} for k in _RECORD_KEYS}
    includes: list[str] = []
    for raw in (text or "").splitlines():
        line = _strip(raw)
        if not line:
            continue
        if line.lower().startswith("include "):
            includes.append(line.split(None, 1)[1])
            continue
        pairs = _PAIR.findall(line)
        if not pairs:
            continue
        first = pairs[0][0].lower()
        if first in records:
            name = pairs[0][1]
            attrs = {k.lower(): v for k, v in pairs[1:]}
            records[first][name] = attrs
            continue
        for k, v in pairs:
            # a key given on several lines (SlurmctldHost: the primary, then each backup)
            # keeps every value in order, so a change to any of them is seen
            keys[k.lower()] = f"{keys[k.lower()]}\n{v}" if k.lower() in keys else v
    return {"keys": keys, "records": records, "includes": includes}


def slurm_conf_value(text: str, key: str, default: str | None = None) -> str | None:
    """One global key of a slurm.conf text (case-insensitive), e.g. StateSaveLocation."""
    return parse_slurm_conf(text)["keys"].get(key.lower(), default)


def _tokens(value: str | None) -> set[str]:
    return {t.split("=", 1)[0].strip().lower() for t in (value or "").split(",") if t.strip()}


def _needs_restart_key(key: str, old: str | None, new: str | None) -> bool:
    if key in RESTART_KEYS or key.endswith(RESTART_SUFFIXES):
        return True
    watched = RESTART_TOKENS.get(key)
    if watched:
        return bool((_tokens(old) ^ _tokens(new)) & watched)
    return False


def slurm_conf_change(old_text: str | None, new_text: str) -> str:
    """What a running slurmctld needs after slurm.conf goes from *old_text* to *new_text*.

    ``none`` (only comments/whitespace changed), ``reconfigure`` (``scontrol
    reconfigure`` picks it up) or ``restart``.  No old text (first install) is
    ``restart``: nothing is known about the running daemon.
    """
    if not old_text:
        return RESTART
    old, new = parse_slurm_conf(old_text), parse_slurm_conf(new_text)
    verdict = NONE
    if old["includes"] != new["includes"]:
        verdict = RECONFIGURE
    for key in sorted(set(old["keys"]) | set(new["keys"])):
        a, b = old["keys"].get(key), new["keys"].get(key)
        if a == b:
            continue
        if _needs_restart_key(key, a, b):
            return RESTART
        verdict = RECONFIGURE
    # Nodes: any change to the node definitions (added, removed, CPUs, Gres, ...).
    for kind in ("nodename", "nodeset", "frontendname"):
        if old["records"][kind] != new["records"][kind]:
            return RESTART
    old_parts, new_parts = old["records"]["partitionname"], new["records"]["partitionname"]
    if set(old_parts) != set(new_parts):
        return RESTART
    for name, attrs in new_parts.items():
        before = old_parts[name]
        if before.get("nodes") != attrs.get("nodes"):
            return RESTART
        if before != attrs:
            verdict = RECONFIGURE
    if old["records"]["downnodes"] != new["records"]["downnodes"]:
        verdict = RECONFIGURE
    return verdict


def slurm_action(results: list[dict[str, Any]], conf_name: str = "slurm.conf") -> str:
    """The slurmctld action for a looped ``copy`` result list (run with ``diff: true``).

    slurm.conf goes through :func:`slurm_conf_change`; any other changed file
    (topology.conf, gres.conf, cgroup.conf, ...) is re-read by ``scontrol reconfigure``.
    """
    verdict = NONE
    rank = {NONE: 0, RECONFIGURE: 1, RESTART: 2}
    for res in results or []:
        if not res.get("changed"):
            continue
        item = res.get("item")
        # A loop over file names (configure.yml) or over {dest: ...} maps; in check mode
        # copy may return no dest, so the item decides.
        dest = str(res.get("dest") or (item.get("dest", "") if isinstance(item, dict) else item or ""))
        if dest.rsplit("/", 1)[-1] == conf_name:
            diffs = res.get("diff") or []
            diff = diffs[0] if isinstance(diffs, list) and diffs else (diffs or {})
            before = diff.get("before") if isinstance(diff, dict) else None
            after = diff.get("after") if isinstance(diff, dict) else None
            if after is None:
                this = RESTART  # no diff available: assume the worst
            else:
                this = slurm_conf_change(before or "", after)
        else:
            this = RECONFIGURE
        if rank[this] > rank[verdict]:
            verdict = this
    return verdict


class FilterModule:
    """Ansible filters: slurm_conf_change, slurm_conf_value, slurm_action."""

    def filters(self) -> dict[str, Any]:
        return {
            "slurm_conf_change": slurm_conf_change,
            "slurm_conf_value": slurm_conf_value,
            "slurm_action": slurm_action,
        }

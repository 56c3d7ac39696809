"""Parsers for ``scontrol show`` output (Slurm 22.05 and later): records of ``Key=Value``.

Both forms scontrol prints are read: the default one (a record starts at column 0 and
continues on indented lines, records separated by blank lines) and ``-o`` (one record
per line). A value runs up to the next `` Key=`` (keys are CamelCase), so values with
spaces survive (``OS=Linux 6.1 #1 SMP``), and ``Reason=`` runs to its ``[user@time]``
suffix, so a reason may even contain ``key=value`` words. Values that hold ``=``
themselves (``CfgTRES=cpu=2,mem=1000M``, ``JobDefaults=DefCpuPerGPU=1``) stay whole.
Hostlists are expanded with ClusterShell (:mod:`railyard.hostlist`).
"""

from __future__ import annotations

import re

from railyard.drift.observed import SlurmBlock, SlurmNode, SlurmPartition, SlurmSwitch
from railyard.hostlist import expand

# A key starts a word and is CamelCase (MCS_label, CPUEfctv, ExtSensorsJoules, TRES).
_KEY = re.compile(r"(?:(?<=\s)|^)([A-Z][A-Za-z0-9_]*)=")
# Slurm appends who set a reason and when: "maintenance [root@2026-12-03T06:53:58]".
_REASON_BY = re.compile(r"\s*\[([^\[\]\s]+@[^\[\]\s]+)\]")
NULL = ("(null)", "None", "N/A", "")


def _records_text(text: str) -> list[str]:
    """Group lines into records: a line at column 0 starts one, indented lines continue it."""
    records: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line[0].isspace() and records:
            records[-1].append(line.strip())
        else:
            records.append([line.strip()])
    # Lines, not one joined string: on its own line a Reason= can only end at the line end.
    return ["\n".join(r) for r in records if any("=" in part for part in r)]


def _parse_line(line: str, out: dict[str, str]) -> None:
    matches = list(_KEY.finditer(line))
    i = 0
    while i < len(matches):
        m = matches[i]
        key = m.group(1)
        start = m.end()
        if key == "Reason":
            by = _REASON_BY.search(line, start)
            if by is not None:
                out[key] = line[start:by.end()].strip()
                i += 1
                while i < len(matches) and matches[i].start() < by.end():
                    i += 1  # Key= words inside the reason
                continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[key] = line[start:end].strip()
        i += 1


def parse_records(text: str) -> list[dict[str, str]]:
    """Every record in ``text`` as a dict of the raw strings scontrol printed, in order."""
    out = []
    for record in _records_text(text):
        fields: dict[str, str] = {}
        for line in record.split("\n"):
            _parse_line(line, fields)
        out.append(fields)
    return out


def hostlist(value: str | None) -> tuple[str, ...]:
    if value is None or value.strip() in NULL:
        return ()
    return tuple(expand(value.strip()))


def split_reason(value: str) -> tuple[str, str]:
    """``maintenance [root@2026-...]`` -> (maintenance, root@2026-...)."""
    m = _REASON_BY.search(value)
    if m is None or m.end() != len(value):
        return value.strip(), ""
    return value[: m.start()].strip(), m.group(1)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def parse_nodes(text: str) -> list[SlurmNode]:
    """``scontrol show node`` (either form)."""
    nodes = []
    for rec in parse_records(text):
        if "NodeName" not in rec:
            continue
        reason, by = split_reason(rec.get("Reason", ""))
        gres = rec.get("Gres", "")
        nodes.append(
            SlurmNode(
                name=rec["NodeName"],
                state=rec.get("State", ""),
                reason="" if reason in NULL else reason,
                reason_by=by,
                partitions=tuple(p for p in rec.get("Partitions", "").split(",") if p and p not in NULL),
                cpus=_int(rec.get("CPUTot")),
                sockets=_int(rec.get("Sockets")),
                cores_per_socket=_int(rec.get("CoresPerSocket")),
                threads_per_core=_int(rec.get("ThreadsPerCore")),
                real_memory=_int(rec.get("RealMemory")),
                gres="" if gres in NULL else gres,
            )
        )
    return nodes


def parse_partitions(text: str) -> list[SlurmPartition]:
    """``scontrol show partition`` (either form)."""
    parts = []
    for rec in parse_records(text):
        if "PartitionName" not in rec:
            continue
        defaults = rec.get("JobDefaults", "")
        pairs = tuple(
            tuple(kv.split("=", 1)) for kv in defaults.split(",") if "=" in kv and defaults not in NULL
        )
        parts.append(
            SlurmPartition(
                name=rec["PartitionName"],
                nodes=hostlist(rec.get("Nodes")),
                default=rec.get("Default", "NO").upper() == "YES",
                max_time=rec.get("MaxTime", ""),
                default_time=rec.get("DefaultTime", "NONE"),
                state=rec.get("State", ""),
                job_defaults=pairs,  # type: ignore[arg-type]
            )
        )
    return parts


def parse_topology(text: str) -> tuple[list[SlurmSwitch], list[SlurmBlock]]:
    """``scontrol show topology``: switches (tree) and blocks (block). Empty without a plugin
    (22.05 then prints "No topology information available" on stderr and exits 0)."""
    switches, blocks = [], []
    for rec in parse_records(text):
        if "SwitchName" in rec:
            switches.append(
                SlurmSwitch(
                    name=rec["SwitchName"],
                    level=_int(rec.get("Level")) or 0,
                    link_speed=rec.get("LinkSpeed", ""),
                    nodes=hostlist(rec.get("Nodes")),
                    switches=hostlist(rec.get("Switches")),
                )
            )
        elif "BlockName" in rec:
            blocks.append(SlurmBlock(name=rec["BlockName"], nodes=hostlist(rec.get("Nodes"))))
    return switches, blocks


# --------------------------------------------------------------------------- time

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def time_seconds(value: str | None) -> int | None:
    """A Slurm time limit in seconds; None for UNLIMITED/INFINITE/NONE.

    Slurm's forms: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``.
    """
    if value is None:
        return None
    text = value.strip().upper()
    if text in ("", "UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"not a Slurm time: {value!r}")
    days, a, b, c = m.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # hours:minutes:seconds
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # minutes:seconds
        return int(a) * 60 + int(b)
    return int(a) * 60  # minutes

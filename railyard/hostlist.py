"""Hostlists (``gpu[001-032]``) through ClusterShell, the library Slurm sites already use."""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

__all__ = ["HostlistError", "expand", "fold"]


class HostlistError(ValueError):
    pass


def expand(hostlist: str | Iterable[str]) -> list[str]:
    """Names in the order written: ``"gpu[001-002],kw1"`` -> ``["gpu001", "gpu002", "kw1"]``."""
    parts = [hostlist] if isinstance(hostlist, str) else list(hostlist)
    names: list[str] = []
    for part in parts:
        try:
            # NodeSet sorts; a list keeps the user's order, which decides SU and address order.
            for chunk in _split_top_level(part):
                names.extend(NodeSet(chunk))
        except NodeSetParseError as exc:
            raise HostlistError(f"{part!r} is not a valid hostlist ({exc})") from None
    return names


def fold(names: Iterable[str]) -> str:
    """The shortest hostlist for ``names``, as Slurm writes it: ``gpu[001-004]``."""
    return str(NodeSet.fromlist(list(names)))


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets, so order across comma-separated parts is kept."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return [p for p in out if p]

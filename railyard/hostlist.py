"""Hostlists (``gpu[001-032]``) through ClusterShell, the library Slurm sites already use.

The common shapes take a short cut through ClusterShell's RangeSet: a name with one
[range] (``gpu[0001-4096]``) and names with one number at the end (``gpu0001``). The
commonest of all, one span whose ends have as many digits and one unbroken run of
numbers, skip RangeSet too: it sorts every number with a Python key (0.2 s for the
70,000 names of a 5 MB spec). The NodeSet parser, which handles every shape, costs tens
of microseconds per name, seconds at the tens of thousands of nodes of the largest
sites. All paths give the same names and the same folded text (tests/test_hostlist.py
compares them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetBase, NodeSetParseError
from ClusterShell.RangeSet import RangeSet, RangeSetParseError

__all__ = ["HostlistError", "expand", "fold", "refold"]

_PLAIN = re.compile(r"[A-Za-z._-]*")  # name characters but digits: no NodeSet operator
_ONE_RANGE = re.compile(rf"({_PLAIN.pattern})\[([0-9,-]+)\]({_PLAIN.pattern})")  # gpu[001-032]
_ONE_NUMBER = re.compile(rf"({_PLAIN.pattern})(\d+)")  # gpu001
_SPAN = re.compile(r"(\d+)-(\d+)")  # 001-032


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
                names.extend(_expand_chunk(chunk))
        except NodeSetParseError as exc:
            raise HostlistError(f"{part!r} is not a valid hostlist ({exc})") from None
    return names


def _expand_chunk(chunk: str) -> Iterable[str]:
    m = _ONE_RANGE.fullmatch(chunk)
    if m is not None:
        prefix, ranges, suffix = m.groups()
        span = _SPAN.fullmatch(ranges)
        if span is not None and len(span[1]) == len(span[2]) and span[1] <= span[2]:
            # one range whose ends have as many digits (gpu[00001-70240]): every number in it
            # has that many, written as RangeSet would pad it, without its per-number sorting
            width = len(span[1])
            return [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(span[1]), int(span[2]) + 1)]
        try:
            return [f"{prefix}{i}{suffix}" for i in RangeSet(ranges).striter()]
        except RangeSetParseError:
            pass  # NodeSet raises it again, worded as users know it
    return NodeSet(chunk)


def fold(names: Iterable[str]) -> str:
    """The shortest hostlist for ``names``, as Slurm writes it: ``gpu[001-004]``."""
    names = list(names)
    numbers: dict[str, list[str]] = {}  # prefix -> the numbers after it, as written
    others: list[str] = []
    for name in names:
        m = _ONE_NUMBER.fullmatch(name)
        if m is None:
            others.append(name)
        else:
            numbers.setdefault(m[1], []).append(m[2])
    if not others and len(numbers) == 1:
        [(prefix, digits)] = numbers.items()
        if _one_run(digits):
            return prefix + _span(digits[0], digits[-1])
    nodeset = NodeSet.fromlist(others)
    for prefix, digits in numbers.items():
        ranges = RangeSet()
        ranges.update(digits)
        # The NodeSet takes the (pattern, RangeSet) pair as it is: no text to write and parse back.
        nodeset.update(NodeSetBase(f"{prefix}%s", ranges, copy_rangeset=False))
    return str(nodeset)


def refold(hostlist: str) -> str:
    """``fold(expand(hostlist))``, folded by ClusterShell from the text: no name is written out."""
    m = _ONE_RANGE.fullmatch(hostlist)
    span = _SPAN.fullmatch(m[2]) if m is not None else None
    if m is not None and span is not None and len(span[1]) == len(span[2]) and span[1] <= span[2]:
        return m[1] + _span(span[1], span[2]) + m[3]  # one span (gpu[00001-70240]): as it is
    try:
        return str(NodeSet(hostlist))
    except NodeSetParseError as exc:
        raise HostlistError(f"{hostlist!r} is not a valid hostlist ({exc})") from None


def _one_run(digits: list[str]) -> bool:
    """Numbers of one width, each one more than the one before (0098, 0099, 0100)."""
    width, first = len(digits[0]), int(digits[0])
    return all(len(d) == width and int(d) == first + i for i, d in enumerate(digits))


def _span(first: str, last: str) -> str:
    """A run of numbers as ClusterShell folds it: ``[0098-0100]``, or one number alone."""
    return first if first == last else f"[{first}-{last}]"


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

"""Reading a spec file: bounded, in one pass, whatever bytes it holds.

A spec comes from a person (typos) or from anywhere (hostile input), so reading it must
end quickly with a clear answer. The YAML text is parsed once, by libyaml (the C reader)
when PyYAML has it, and the data, the line of every key and the text of every scalar
that YAML read as something other than a string are built from the parser's events in
the same walk. Nothing recursive runs on the input, so no depth of nesting can overflow
a stack, and every limit below is checked while reading, before anything is expanded.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from railyard.errors import Problem, SpecError

# The limits. A real spec is a few kB to a few hundred kB (a 10,000-node cluster with a
# pinned address per node is about 500 kB); each limit is far above that and far below
# what would take more than seconds or hundreds of MB to read.
MAX_BYTES = 8 * 1024 * 1024  # 8 MiB: the 5 MB benchmark spec fits, with room
MAX_DEPTH = 32  # a spec nests about 8 levels deep
MAX_ALIAS_NODES = 100_000  # values reached again through *aliases, counted as copies
MAX_SCALAR_CHARS = 1024 * 1024  # a long hostlist of scattered nodes; far below the file limit

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
LIBYAML = _Loader is not yaml.SafeLoader

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {
    _STR,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:timestamp",
}
_CONTAINER_TAGS = {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


@dataclass
class Parsed:
    """A spec's data with where each part of it came from."""

    data: Any
    lines: dict[str, int] = field(default_factory=dict)  # YAML path -> line
    # YAML path -> the scalar as typed, where YAML read it as a number, bool, date or null.
    raw: dict[str, str] = field(default_factory=dict)


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, refusing one larger than MAX_BYTES before reading it all."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(str(path), [Problem("<file>", f"cannot read the spec: {exc.strerror or exc}")]) from None
    if len(data) > MAX_BYTES:
        raise SpecError(str(path), [Problem("<file>", _too_big())])
    return data


def _too_big() -> str:
    return (
        f"the spec is larger than the limit of {MAX_BYTES // (1024 * 1024)} MiB "
        f"({MAX_BYTES} bytes); a spec describes hosts by hostlists and patterns "
        "(e.g. names: gpu[0001-4096]), not one entry per host"
    )


def decode(data: bytes, source: str) -> str:
    """UTF-8 text (a UTF-8 or UTF-16 byte-order mark is honoured), or a SpecError naming
    the first byte that is not, with its line and column."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise SpecError(source, [Problem("<file>", "the file starts with a UTF-16 mark but is not "
                                             "UTF-16 text; save it as UTF-8")]) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        head = data[: exc.start]
        line = head.count(b"\n") + 1
        column = exc.start - (head.rfind(b"\n") + 1) + 1
        bad = data[exc.start : exc.start + 1]
        guess = ""
        if bad and bad[0] >= 0xA0:
            guess = f" (in Latin-1 it would be {bad.decode('latin-1')!r})"
        raise SpecError(
            source,
            [Problem("<file>", f"byte 0x{bad.hex()} at line {line}, column {column} is not UTF-8"
                     f"{guess}; save the file as UTF-8", line)],
        ) from None


def parse(text: str, source: str) -> Parsed:
    """Parse one YAML document into plain data, within the limits above."""
    if len(text) > MAX_BYTES:
        raise SpecError(source, [Problem("<file>", _too_big())])
    try:
        return _Builder(text, source).build()
    except SpecError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in what:  # libyaml's own cap (1000) met before ours could count
            what = f"values nest deeper than {MAX_DEPTH} levels, the limit; a spec nests about 8"
            raise SpecError(source, [Problem("<yaml>", what, line)]) from None
        raise SpecError(source, [Problem("<yaml>", f"not valid YAML: {what}; fix the syntax", line)]) from None
    except (UnicodeError, ValueError) as exc:  # lone surrogates in a str, libyaml's encoder
        raise SpecError(source, [Problem("<yaml>", f"cannot read the text: {exc}; save the file as UTF-8")]) from None


class _Frame:
    __slots__ = ("anchor", "container", "is_map", "key", "key_line", "keys", "line", "merges", "path", "size")

    def __init__(self, container: Any, is_map: bool, path: str, anchor: str | None, line: int) -> None:
        self.container = container
        self.is_map = is_map
        self.path = path
        self.anchor = anchor
        self.line = line
        self.key: Any = _NO_KEY
        self.key_line = line
        self.size = 1
        self.merges: list[tuple[Any, int]] = []
        self.keys: dict[Any, int] = {}


_NO_KEY = object()


class _Builder:
    def __init__(self, text: str, source: str) -> None:
        self.loader = _Loader(text)
        self.source = source
        self.parsed = Parsed(None)
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.alias_nodes = 0
        # plain scalar text -> (value, read as a string?): a spec repeats its keys and
        # values thousands of times, and resolving each is most of a walk's time
        self.plain: dict[str, tuple[Any, bool]] = {}

    def fail(self, message: str, line: int | None, path: str = "<yaml>") -> None:
        raise SpecError(self.source, [Problem(path or "<root>", message, line)])

    def build(self) -> Parsed:
        loader = self.loader
        try:
            loader.get_event()  # StreamStart
            if loader.check_event(yaml.StreamEndEvent):
                return self.parsed  # empty file: data None
            loader.get_event()  # DocumentStart
            self.parsed.data = self._document()
            loader.get_event()  # DocumentEnd
            if not loader.check_event(yaml.StreamEndEvent):
                event = loader.get_event()
                self.fail("the file holds more than one YAML document (a second '---'); "
                          "a spec is one document", event.start_mark.line + 1)
        finally:
            dispose = getattr(loader, "dispose", None)
            if dispose is not None:
                dispose()
        return self.parsed

    @staticmethod
    def _path_in(top: _Frame | None) -> str | None:
        """The YAML path of the value the parser is at: None when it is a mapping's key."""
        if top is None:
            return ""
        if top.is_map:
            if top.key is _NO_KEY:
                return None
            return f"{top.path}.{top.key}" if top.path else str(top.key)
        return f"{top.path}[{len(top.container)}]"

    def _document(self) -> Any:
        get_event = self.loader.get_event
        lines = self.parsed.lines
        plain = self.plain
        scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
        starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
        ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
        stack: list[_Frame] = []
        top: _Frame | None = None
        while True:
            event = get_event()
            cls = type(event)
            if cls is scalar_event:
                value = event.value
                # The common case first: plain text seen before as a string or that can only be
                # one (a name, an address), or quoted text.
                if event.tag is None and event.anchor is None and len(value) <= MAX_SCALAR_CHARS and (
                    not event.implicit[0] or (plain.get(value) or (None, False))[1] or _only_text(value)
                ):
                    pass
                else:
                    value = self._scalar(event, event.start_mark.line + 1, self._path_in(top))
                    if event.anchor is not None:
                        self.anchors[event.anchor] = (value, 1)
                size = 1
            elif cls is alias_event:
                line = event.start_mark.line + 1
                if event.anchor not in self.anchors:
                    self.fail(f"alias *{event.anchor} has no anchor &{event.anchor} before it", line,
                              self._path_in(top) or "<yaml>")
                value, size = self.anchors[event.anchor]
                self.alias_nodes += size
                if self.alias_nodes > MAX_ALIAS_NODES:
                    self.fail(
                        f"aliases (*{event.anchor} and others) expand to more than {MAX_ALIAS_NODES} "
                        "values, the limit; a spec reuses a block a few times, not exponentially",
                        line,
                        self._path_in(top) or "<yaml>",
                    )
                if top is not None and top.is_map and top.key is _NO_KEY and isinstance(value, dict | list):
                    self.fail("a key must be plain text, not an alias of a list or mapping", line)
            elif cls in starts:
                line = event.start_mark.line + 1
                path = self._path_in(top)
                if path is None:
                    self.fail("a key must be plain text, not a list or a mapping", line)
                if event.tag not in _CONTAINER_TAGS:
                    self.fail(f"tag {event.tag} is not used in a spec; remove it", line, path or "<root>")
                if len(stack) >= MAX_DEPTH:
                    self.fail(f"values nest deeper than {MAX_DEPTH} levels, the limit; a spec nests about 8",
                              line, path or "<root>")
                is_map = cls is yaml.MappingStartEvent
                if path not in lines:
                    lines[path] = line
                top = _Frame({} if is_map else [], is_map, path, event.anchor, line)  # type: ignore[arg-type]
                stack.append(top)
                continue
            elif cls in ends:
                frame = stack.pop()
                if frame.merges:
                    self._merge(frame)
                value, size = frame.container, frame.size
                if frame.anchor is not None:
                    self.anchors[frame.anchor] = (value, size)
                top = stack[-1] if stack else None
            else:  # pragma: no cover - the parser emits nothing else inside a document
                self.fail(f"unexpected YAML event {cls.__name__}", event.start_mark.line + 1)
            if top is None:
                return value
            top.size += size
            if top.is_map:
                if top.key is _NO_KEY:
                    self._key(top, value, event)
                else:
                    if top.key is _MERGE_KEY:
                        top.merges.append((value, event.start_mark.line + 1))
                    else:
                        top.container[top.key] = value
                    top.key = _NO_KEY
            else:
                top.container.append(value)

    def _key(self, frame: _Frame, key: Any, event: Any) -> None:
        line = event.start_mark.line + 1
        if key == "<<" and isinstance(event, yaml.ScalarEvent) and event.tag is None and event.implicit[0]:
            frame.key = _MERGE_KEY
            return
        if key in frame.keys:
            where = f"{frame.path}.{key}" if frame.path else str(key)
            self.fail(
                f"key '{key}' appears twice in this mapping, at lines {frame.keys[key]} and {line}; "
                "YAML would keep only the last one: keep one of them",
                line,
                where,
            )
        frame.keys[key] = line
        frame.key = key
        child = f"{frame.path}.{key}" if frame.path else str(key)
        self.parsed.lines[child] = line

    def _merge(self, frame: _Frame) -> None:
        """``<<: *base`` (or a list of them): keys not written here come from the bases."""
        for value, line in frame.merges:
            bases = value if isinstance(value, list) else [value]
            for base in bases:
                if not isinstance(base, dict):
                    self.fail("'<<' merges mappings only: give it an alias of a mapping", line, frame.path)
                for k, v in base.items():
                    if k not in frame.container:
                        frame.container[k] = v
                        self.alias_nodes += 1
        if self.alias_nodes > MAX_ALIAS_NODES:
            self.fail(f"aliases and merges expand to more than {MAX_ALIAS_NODES} values, the limit",
                      frame.line, frame.path)

    def _scalar(self, event: Any, line: int, path: str | None) -> Any:
        value = event.value
        if len(value) > MAX_SCALAR_CHARS:
            self.fail(f"a text of {len(value)} characters; the limit is {MAX_SCALAR_CHARS}, "
                      "write long hostlists with [ranges]", line, path or "<yaml>")
        tag = event.tag
        if tag is None:
            if not event.implicit[0]:
                return value  # quoted or block text: a string
            known = self.plain.get(value)
            if known is not None:
                if not known[1] and path is not None:
                    self.parsed.raw[path] = value
                return known[0]
            tag = self.loader.resolve(yaml.ScalarNode, value, event.implicit)
            if tag == _STR:
                self.plain[value] = (value, True)
                return value
        elif tag == "!":
            return value
        if tag == _STR or tag == _MERGE:  # '<<' as a key merges (see _key), elsewhere it is text
            return value
        if tag not in _SCALAR_TAGS:
            self.fail(f"tag {tag} is not used in a spec; remove it", line, path or "<yaml>")
        node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        try:
            out = self.loader.yaml_constructors[tag](self.loader, node)
        except (yaml.YAMLError, ValueError, OverflowError):
            self.fail(f"{value!r} cannot be read as {tag.rsplit(':', 1)[-1]}", line, path or "<yaml>")
        if path is not None:
            self.parsed.raw[path] = value
        if event.tag is None and not isinstance(out, list | dict | bytes):
            self.plain[value] = (out, False)
        return out


_MERGE_KEY = object()


def _only_text(value: str) -> bool:
    """Plain text that YAML cannot read as anything but a string, told without PyYAML's
    regular expressions (a third of reading a spec of 70,000 names and addresses, each
    seen once). PyYAML tries only bool and null on a word starting with one of
    ``yYnNtTfFoO``, and none of those words is longer than 5 letters (``false``); only
    int, float and timestamp on text starting with a digit, and none of them holds two
    dots (``10.0.0.5``). tests/test_hostile_specs.py checks this against PyYAML."""
    first = value[:1]
    return (len(value) > 5 and first in "yYnNtTfFoO") or (first.isdigit() and value.count(".") > 1)

"""Fuzz: hypothesis mutates valid specs (values, types, structure, bytes) and `railyard
validate` must answer each one cleanly (issue 20).

For every example: validate exits 0 or 1 with no traceback, in under 5 s, within 500 MB
more address space (RLIMIT_AS while it runs); an invalid spec renders nothing; a valid one renders files that
each parse with their own format's parser (slurm.conf-style key=value, exports, systemd
units through `systemd-analyze verify` when the host has it and always through a strict
unit-file parser, YAML objects, JSON).

The CI run is bounded (derandomized, 450 examples, about 20 s on two busy
cores); RAILYARD_FUZZ_EXAMPLES=N runs N per strategy, which is what
benchmarks/fuzz_bench.py does for a long run.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from railyard import cli, exitcodes
from railyard.fieldtypes import EXPORT_FLAGS, EXPORT_VALUES, label_problem
from railyard.render import SLURM_CONFIG_FILES
from tests.conftest import ROOT

BASES = {name: (ROOT / "inventories" / name / "cluster.yaml") for name in ("lab", "dgx-h100")}
BASE_TEXT = {name: path.read_text() for name, path in BASES.items()}
BASE_DATA = {name: yaml.safe_load(text) for name, text in BASE_TEXT.items()}

EXAMPLES = int(os.environ.get("RAILYARD_FUZZ_EXAMPLES", "0"))
SECONDS = 5.0
PEAK_MB = 500
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def fuzz_settings(default: int) -> Any:
    return settings(
        max_examples=EXAMPLES or default,
        deadline=None,  # the 5 s limit is asserted by the test itself, with a clear message
        derandomize=not EXAMPLES,  # CI: the same examples every run; a long run explores
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        database=None,
    )


# ---------------------------------------------------------------- what the mutations use

HOSTILE = [
    "", " ", "\n", "a\nb", "x # y", "a=b", "rw)\n/ *(rw,no_root_squash", "/", "//shared", "/proc", "/etc/x",
    "/export/../etc", "../x", "gpu[1-999999999]", "gpu[001-", "gpu{index:0999999999}", "{name.__class__}",
    "https://u:p@host/x", "https://{name}-bmc", "env:X", "23.11", "1-00:00:00", "INFINITE", "gpu001",
    "gpu001,gpu002", "nfs1", "10.77.0.1/24", "10.77.0.5", "h100", "mlx5_0", "/dev/nvidia[0-7]", "%h", "$(id -u)",
    "gpu001\n", "lab\n", "120\n", "x" * 70, "\u00e9", "\x00", "\t", "yes", "null", "~", "@all", "a b", "'", '"', "*", "&a", "!!python/object",
]
SCALARS = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=24),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, 1, 2, 3, 8, 64, 10**12, -1, 1.5, 23.11, float("inf"), True, False, None]),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["name", "nodes", "x", "count", "path"]), SCALARS, max_size=2),
)


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, (*prefix, i))
    return out


BASE_PATHS = {name: paths(data) for name, data in BASE_DATA.items()}


def _parent(data: Any, path: tuple) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def mutate(data: Any, draw: Any, base: str) -> Any:
    spec = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(BASE_PATHS[base]))
        try:
            parent = _parent(spec, path)
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, dict | list):
            continue
        kind = draw(st.sampled_from(["value", "value", "delete", "duplicate", "unknown-key", "graft"]))
        if kind == "value":
            parent[path[-1]] = draw(VALUES)
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        elif kind == "unknown-key" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.sampled_from(["extra", "nmae", "nodes", "clients"]))] = draw(SCALARS)
        elif kind == "graft":
            other = draw(st.sampled_from(BASE_PATHS[base]))
            with contextlib.suppress(KeyError, IndexError, TypeError):
                parent[path[-1]] = copy.deepcopy(_parent(data, other)[other[-1]])
    return spec


# ---------------------------------------------------------------- running validate


class Overtime(BaseException):
    """Raised by the alarm; not an Exception, so railyard's own handler cannot take it."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise Overtime


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def run(*args: str) -> tuple[int, str, float]:
    """railyard's main, in this process (a fresh process per example would cost ~1 s).

    Memory: the address space may grow by at most PEAK_MB while it runs (RLIMIT_AS), so an
    example that would take more gets a MemoryError, which railyard reports as an internal
    error (exit 70) and the test as over the limit. The session's peak RSS could not say
    this per example: other tests in the same process set it."""
    buf = io.StringIO()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + PEAK_MB * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    old = signal.signal(signal.SIGALRM, _alarm)
    # A hang fails here, not in CI's timeout; pytest-timeout's own timer (the same signal) is
    # put back afterwards with what it had left.
    outer, _ = signal.setitimer(signal.ITIMER_REAL, SECONDS * 2)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    except Overtime:
        pytest.fail(f"railyard {' '.join(args)} ran past {SECONDS * 2} s")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.perf_counter() - start), 0.001))
    return code, buf.getvalue(), time.perf_counter() - start


def check(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="railyard-fuzz-") as tmp:
        spec = Path(tmp) / "cluster.yaml"
        spec.write_bytes(data)
        code, output, seconds = run("validate", str(spec))
        shown = data[:2000].decode("utf-8", "replace")
        over = f" (more than {PEAK_MB} MB)" if "MemoryError" in output else ""
        assert code in (exitcodes.OK, exitcodes.ERROR), f"validate exited {code}{over}:\n{output}\nspec:\n{shown}"
        assert "Traceback" not in output, f"a traceback:\n{output}\nspec:\n{shown}"
        assert seconds < SECONDS, f"validate took {seconds:.1f} s (limit {SECONDS} s)\nspec:\n{shown}"
        with contextlib.suppress(InvalidArgument):  # outside @given (the unmutated bases)
            event("valid" if code == exitcodes.OK else "invalid")
        out = Path(tmp) / "out"
        rcode, routput, _ = run("render", str(spec), "-o", str(out))
        if code == exitcodes.ERROR:
            assert rcode == exitcodes.ERROR, f"render of an invalid spec exited {rcode}:\n{routput}"
            assert not out.exists(), "an invalid spec rendered files"
            return
        assert rcode == exitcodes.OK, f"render of a valid spec exited {rcode}:\n{routput}\nspec:\n{shown}"
        check_rendered(out)


# ---------------------------------------------------------------- each format's parser

_KEY_VALUE = re.compile(r"^[A-Za-z][A-Za-z0-9]*=[^\s=#][^\s#]*$")
_SLURM_LIKE = tuple(f"slurm/{n}" for n in SLURM_CONFIG_FILES if n.endswith(".conf"))


def parse_key_value(text: str, name: str) -> list[dict[str, str]]:
    """slurm.conf, gres.conf, topology.conf, cgroup.conf: lines of Key=Value words."""
    lines = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split(" ")
        for w in words:
            assert _KEY_VALUE.match(w), f"{name}:{n}: {w!r} is not Key=Value in {line!r}"
        lines.append(dict(w.split("=", 1) for w in words))
    return lines


def parse_exports(text: str) -> list[tuple[str, str, list[str]]]:
    """exports(5): 'path client(options)' per line, every option one exports(5) knows."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"(/[A-Za-z0-9._/+-]*) ([0-9./]+)\(([^()\s]+)\)", line)
        assert m, f"exports:{n}: {line!r} is not 'path client(options)'"
        options = m.group(3).split(",")
        for opt in options:
            key, eq, value = opt.partition("=")
            assert (not eq and opt in EXPORT_FLAGS) or (eq and re.fullmatch(EXPORT_VALUES[key], value)), opt
        out.append((m.group(1), m.group(2), options))
    return out


UNIT_KEYS = {
    "Unit": {"Description", "Wants", "After", "Requires", "Before"},
    "Mount": {"What", "Where", "Type", "Options"},
    "Install": {"WantedBy"},
}


def parse_unit(text: str, name: str) -> dict[str, dict[str, str]]:
    """A strict systemd unit parser: known sections and keys, one Key=value per line."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert re.fullmatch(r"\[(Unit|Mount|Install)\]", line), f"{name}:{n}: section {line!r}"
            current = line[1:-1]
            assert current not in sections, f"{name}:{n}: section {current} twice"
            sections[current] = {}
            continue
        assert current is not None, f"{name}:{n}: a key before any section"
        key, eq, value = line.partition("=")
        assert eq and key in UNIT_KEYS[current], f"{name}:{n}: {line!r} is not a known key of [{current}]"
        assert key not in sections[current], f"{name}:{n}: {key} twice"
        assert "%" not in value and "\\" not in value, f"{name}:{n}: specifier or escape in {value!r}"
        sections[current][key] = value
    assert sections.get("Mount", {}).keys() >= {"What", "Where", "Type"}, f"{name}: incomplete [Mount]"
    return sections


_TOPOLOGY_KEYS = {"topology", "cluster_default", "tree", "block", "flat"}
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.\[\],-]+")  # a name or hostlist in topology.yaml


def parse_topology_yaml(text: str) -> list[dict]:
    """Slurm 25.05's topology.yaml: a list of topologies, each a name, whether it is the
    cluster's default and one of tree (switches with nodes or children), block (block_sizes,
    blocks with nodes) or flat; every name and hostlist one plain word."""
    doc = yaml.safe_load(text)
    assert isinstance(doc, list) and doc, doc
    for topo in doc:
        assert isinstance(topo, dict) and set(topo) <= _TOPOLOGY_KEYS, topo
        assert _SLURM_NAME.fullmatch(topo["topology"]) and isinstance(topo.get("cluster_default", False), bool), topo
        kinds = [k for k in ("tree", "block", "flat") if k in topo]
        assert len(kinds) == 1, topo
        if "tree" in topo:
            for sw in topo["tree"]["switches"]:
                assert set(sw) <= {"switch", "nodes", "children"} and _SLURM_NAME.fullmatch(sw["switch"]), sw
                assert all(_SLURM_NAME.fullmatch(sw[k]) for k in ("nodes", "children") if k in sw), sw
        if "block" in topo:
            assert set(topo["block"]) <= {"block_sizes", "blocks"}, topo["block"]
            assert all(isinstance(n, int) and n > 0 for n in topo["block"].get("block_sizes", [])), topo["block"]
            for b in topo["block"]["blocks"]:
                assert set(b) == {"block", "nodes"} and _SLURM_NAME.fullmatch(b["block"]), b
                assert _SLURM_NAME.fullmatch(b["nodes"]), b
        if "flat" in topo:
            assert topo["flat"] is True, topo
    return doc


def check_rendered(out: Path) -> None:
    files = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}
    for rel, text in files.items():
        if rel in _SLURM_LIKE:
            parse_key_value(text, rel)
        elif rel == "slurm/topology.yaml":
            parse_topology_yaml(text)
        elif rel == "storage/exports":
            parse_exports(text)
        elif rel.startswith("storage/units/"):
            parse_unit(text, rel)
        elif rel.endswith((".yaml", ".conf")) and rel.startswith("kubernetes/"):
            for doc in yaml.safe_load_all(text):
                for obj in doc if isinstance(doc, list) else [doc]:
                    if isinstance(obj, dict) and "kind" in obj:
                        meta = obj["metadata"]
                        assert label_problem(meta["name"]) is None, (rel, meta)
                        assert "namespace" not in meta or label_problem(meta["namespace"]) is None, (rel, meta)
        elif rel.endswith(".json"):
            json.loads(text)
        elif rel in ("slurm/plugstack.conf.d/pyxis.conf", "enroot/enroot.conf", "storage/lustre.conf",
                     "common/hosts") or rel.startswith("nccl/"):
            for line in text.splitlines():
                assert line.isprintable() and (line.startswith("#") or "#" not in line), (rel, line)
    units = sorted(out.glob("storage/units/*"))
    if units and SYSTEMD_ANALYZE:
        res = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", *map(str, units)],
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0 and "Unknown" not in res.stderr, res.stderr


# ---------------------------------------------------------------- the strategies


@st.composite
def mutated_data(draw: Any) -> bytes:
    base = draw(st.sampled_from(["lab", "lab", "lab", "dgx-h100"]))
    spec = mutate(BASE_DATA[base], draw, base)
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True).encode()


@st.composite
def mutated_bytes(draw: Any) -> bytes:
    data = bytearray(BASE_TEXT[draw(st.sampled_from(["lab", "dgx-h100"]))].encode())
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        chunk = draw(st.binary(min_size=1, max_size=4) | st.sampled_from(
            [b"\n", b" ", b"\t", b":", b"- ", b"&a ", b"*a", b"[", b"]", b"{", b"'", b'"', b"\xff", b"\xe9", b"#"]))
        if op == "replace":
            data[at : at + len(chunk)] = chunk
        elif op == "insert":
            data[at:at] = chunk
        else:
            del data[at : at + draw(st.integers(1, 40))]
    return bytes(data)


@st.composite
def mutated_lines(draw: Any) -> bytes:
    """Whole lines duplicated, dropped, re-indented or moved: duplicate keys, broken blocks."""
    lines = BASE_TEXT[draw(st.sampled_from(["lab", "dgx-h100"]))].splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["duplicate", "drop", "indent", "dedent", "move"]))
        if op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "drop":
            del lines[i]
        elif op == "indent":
            lines[i] = "  " + lines[i]
        elif op == "dedent":
            lines[i] = lines[i].removeprefix("  ")
        else:
            lines.insert(draw(st.integers(0, len(lines) - 1)), lines.pop(i))
    return ("\n".join(lines) + "\n").encode()


@fuzz_settings(250)
@given(mutated_data())
def test_fuzz_values_types_structure(data: bytes) -> None:
    check(data)


@fuzz_settings(120)
@given(mutated_bytes())
def test_fuzz_bytes(data: bytes) -> None:
    check(data)


@fuzz_settings(80)
@given(mutated_lines())
def test_fuzz_lines(data: bytes) -> None:
    check(data)


@pytest.mark.parametrize("base", sorted(BASES))
def test_unmutated_bases_pass_every_format_parser(base: str) -> None:
    """The parsers above accept what railyard renders today (else every check is moot)."""
    check(BASE_TEXT[base].encode())


def test_topology_yaml_passes_its_parser(tmp_path: Path) -> None:
    """Slurm 25.05 with NVLink domains renders topology.yaml (tree and block): the parser
    above accepts it, so fuzzed 25.05 specs are checked, not passed over."""
    spec = copy.deepcopy(BASE_DATA["lab"])
    spec["cluster"]["versions"]["slurm"] = "25.05"
    spec["fabric"]["rail_optimized"]["nvlink"] = {"domain_nodes": 1}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    code, output, _ = run("render", str(tmp_path / "cluster.yaml"), "-o", str(tmp_path / "out"))
    assert code == exitcodes.OK, output
    topologies = parse_topology_yaml((tmp_path / "out/slurm/topology.yaml").read_text())
    assert [t["topology"] for t in topologies] == ["fabric", "nvlink", "flat"]


def test_the_parsers_refuse_injected_lines(tmp_path: Path) -> None:
    """The format parsers are strict enough to catch what the issue's attacks would write."""
    with pytest.raises(AssertionError):
        parse_exports("/export/shared 10.77.0.0/24(rw)\n/ *(rw,no_root_squash)\n")
    with pytest.raises(AssertionError):
        parse_key_value("PartitionName=gpu Nodes=a MaxTime=1\nState=DOWN x\n", "slurm.conf")
    with pytest.raises(AssertionError):
        parse_unit("[Mount]\nWhat=a\nWhere=/a\nType=nfs\nExecStartPre=/bin/sh\n", "a.mount")
    with pytest.raises(AssertionError):
        parse_topology_yaml("- topology: t\n  block:\n    blocks:\n    - {block: b1, nodes: 'a b'}\n")

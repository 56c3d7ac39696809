from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import railyard  # noqa: F401 - first, before a test module imports pulumi: see railyard/__init__.py

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "inventories" / "lab" / "cluster.yaml"
EXAMPLES = sorted((ROOT / "inventories").glob("*/cluster.yaml"))


@pytest.fixture(scope="session")
def lab_dict() -> dict:
    return yaml.safe_load(LAB.read_text())


@pytest.fixture
def lab(lab_dict) -> dict:
    """A fresh, mutable copy of the lab spec as data."""
    return copy.deepcopy(lab_dict)


@pytest.fixture(scope="session")
def lab_plan():
    from railyard.load import load_plan

    return load_plan(LAB)


# Suites written but not yet proven green from a clean clone inside CI's limits. They are
# skipped with the reason printed (never counted as passes) until that proof is made;
# RAILYARD_RUN_WIP=1 runs them. Remove an entry only with a clean-clone `make test` run.
WIP: dict[str, str] = {}  # path -> reason; empty: every suite is proven


# Under `make test` (pytest -n 2 --dist loadfile --no-loadscope-reorder) a file runs whole
# on one worker, and the first go out one per worker in turn, so the longest run side by
# side: the e2e on the lab first, then each molecule lane (pytest_xdist_make_scheduler
# below), then the k8s files; the rest fills in behind them.
FIRST = ("e2e", "molecule", "k8s")


def _first(item) -> int:
    kind = _kind(item.nodeid, {m.name for m in item.iter_markers()})
    return FIRST.index(kind) if kind in FIRST else len(FIRST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, except that the molecule scenarios go out by lane: scenarios of two
    lanes share no container name, network, subnet or state dir, so two workers run them
    side by side (tests.support.molecule.Lane), each lane's in order. (--dist loadgroup
    would do it with xdist_group marks, but xdist 3.8 names a group by rewriting
    item._nodeid, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    from tests.support import molecule

    lanes = {f"tests/test_molecule.py::test_molecule[{scenario}]": lane.group
             for lane in molecule.lanes() for scenario in lane.scenarios}

    class ByFileAndLane(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lanes.get(nodeid) or super()._split_scope(nodeid)

    return ByFileAndLane(config, log)


def pytest_configure(config):
    """Inner molecule skips reach `-ra`: the hook that shows skipped subtests must live where
    the summary is written, which under xdist is the controller, not the worker that ran
    the scenario (tests/support/inner_report.py)."""
    from tests.support import inner_report

    inner_report.show_skipped_subtests(config)


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_first)  # stable: files stay whole and in order
    if os.environ.get("RAILYARD_RUN_WIP") == "1":
        return
    for item in items:
        rel = str(Path(item.fspath).relative_to(ROOT))
        if rel in WIP:
            item.add_marker(pytest.mark.skip(reason=f"WIP, RAILYARD_RUN_WIP=1 runs it: {WIP[rel]}"))


# --- where the time went ------------------------------------------------------------------
# A closing table of the run's time per kind of test (set-up, unit, slurmctld, k8s,
# molecule, e2e), so a CI run that grows shows where. Set-up is `make setup`'s wall time,
# which the Makefile passes in RAILYARD_SETUP_SECONDS; each test counts its set-up, call and
# teardown (a module fixture's cost lands on the test that first or last used it).
KINDS = ("unit", "slurmctld", "k8s", "podman", "molecule", "e2e")
_SPENT: dict[str, list[float]] = {}  # kind -> [seconds, tests]


def _kind(nodeid: str, markers) -> str:
    """A test's kind from its id and marker names (a report's keywords carry them, also
    from an xdist worker)."""
    if "e2e" in markers:
        return "e2e"
    if nodeid.startswith("tests/test_molecule.py::test_molecule["):
        return "molecule"
    for marker, kind in (("k8s", "k8s"), ("slurm", "slurmctld"), ("podman", "podman")):
        if marker in markers:
            return kind
    return "unit"


_STARTED: list[float] = []
_STEPS: dict[str, dict[str, float]] = {}  # molecule scenario -> step -> seconds
_CPU: list[dict[str, float]] = []  # /proc/stat at the start of the run


def _cpu_seconds() -> dict[str, float]:
    """The machine's CPU time so far, all cores, by state (/proc/stat's first line, in
    seconds); empty where there is no /proc/stat."""
    import os

    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return {}
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    tick = os.sysconf("SC_CLK_TCK")
    return {name: int(value) / tick for name, value in zip(names, fields)}


def pytest_sessionstart(session):
    import time

    _STARTED.append(time.monotonic())
    _CPU.append(_cpu_seconds())


def pytest_runtest_logreport(report):
    if type(report) is not pytest.TestReport:  # subtest reports are part of their test
        return
    kind = _kind(report.nodeid, report.keywords)
    spent = _SPENT.setdefault(kind, [0.0, 0])
    spent[0] += report.duration
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        spent[1] += 1
    for name, value in report.user_properties:
        if name == "molecule_steps":  # tests/test_molecule.py: each step's wall time
            _STEPS[report.nodeid.partition("[")[2].rstrip("]")] = value


def pytest_terminal_summary(terminalreporter):
    import os
    import time

    if not _SPENT:
        return
    tr = terminalreporter
    wall = time.monotonic() - _STARTED[0] if _STARTED else None
    rows: list[tuple[str, str, float]] = []
    setup = os.environ.get("RAILYARD_SETUP_SECONDS")
    if setup and setup.isdigit():
        rows.append(("set-up", "make setup", float(setup)))
    for kind in KINDS:
        if kind in _SPENT:
            seconds, tests = _SPENT[kind]
            rows.append((kind, f"{tests} tests", seconds))
    total = sum(r[2] for r in rows)
    tr.write_sep("=", "where the time went")
    for name, what, seconds in rows:
        share = 100 * seconds / total if total else 0.0
        tr.write_line(f"{name:<10} {what:>12} {seconds:9.1f} s {seconds / 60:6.1f} min {share:5.1f} %")
    tr.write_line(f"{'total':<10} {'':>12} {total:9.1f} s {total / 60:6.1f} min")
    if wall is not None:
        workers = getattr(tr.config.option, "numprocesses", None)
        side = f"; {workers} workers side by side, so the kinds add up to more than it" if workers else ""
        tr.write_line(f"(pytest wall time {wall:.1f} s{side})")
    now = _cpu_seconds()
    if _CPU and _CPU[0] and now:
        spent = {k: now[k] - _CPU[0].get(k, 0.0) for k in now}
        whole = sum(spent.values())
        waiting = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
        if whole > 0:
            tr.write_line(f"(the machine's CPU over the run: {whole:.0f} core-s, {100 * waiting / whole:.0f} % idle"
                          f" ({spent.get('iowait', 0.0):.0f} s of it waiting on I/O), steal {spent.get('steal', 0.0):.0f} s)")
    if _STEPS:
        _molecule_steps(tr)


def _molecule_steps(tr) -> None:
    """Each scenario's time per molecule step, longest scenario first, and the sums."""
    tr.write_sep("=", "molecule: seconds per step")
    order = ("dependency", "cleanup", "destroy", "syntax", "create", "prepare", "converge", "idempotence", "check",
             "side_effect", "verify")  # molecule's own order; a step of another name goes last
    names = sorted({step for steps in _STEPS.values() for step in steps},
                   key=lambda n: (order.index(n) if n in order else len(order), n))
    width = max(len(scenario) for scenario in _STEPS)
    short = [n.replace("idempotence", "idempot").replace("dependency", "depend").replace("side_effect", "side_eff")
             for n in names]
    tr.write_line(f"{'scenario':<{width}} " + " ".join(f"{n:>8}" for n in short))
    rows = sorted(_STEPS.items(), key=lambda kv: -sum(kv[1].values()))
    for scenario, steps in rows + [("total", {n: sum(s.get(n, 0.0) for s in _STEPS.values()) for n in names})]:
        tr.write_line(f"{scenario:<{width}} " + " ".join(f"{steps.get(n, 0.0):8.0f}" for n in names))

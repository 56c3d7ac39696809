"""Molecule verifier results, carried out to the outer pytest run (tests/test_molecule.py).

Two halves in one module, so that writer and reader agree on one format:

* **inner** (the verifier's pytest, loaded by ``PYTEST_PLUGINS=tests.support.inner_report``
  in ``.config/molecule/config.yml``): when :data:`ENV` names a file, every check's outcome
  is appended to it as one JSON line as soon as it is known (a verifier killed half way
  still leaves what it ran), with the collected count first and the exit status last.
* **outer**: :func:`load` parses that file, :func:`judge` applies the contract and
  :func:`report` turns each inner check into a subtest of ``test_molecule``.

The contract: every verifier check is required. A check that may legitimately not run on
some machine is marked ``@pytest.mark.may_skip("why")``; any other check that skipped fails
its scenario, named with its skip reason. A verifier that collected nothing, or a report
that is missing although molecule got through verify, fails too: a plugin that did not
load must not pass silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ENV = "RAILYARD_INNER_REPORT"  # the report file; the outer test sets it, molecule passes it on
MARKER = "may_skip"
MESSAGE_LIMIT = 2000  # characters of a failure kept in the report

# --- the report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One verifier check: how it ended, why (skip reason or failure), and its may_skip."""

    nodeid: str
    outcome: str  # passed | failed | skipped | error (a setup/teardown/collection failure)
    message: str = ""
    may_skip: str | None = None  # the marker's reason; None: the check is required

    @property
    def allowed_skip(self) -> bool:
        return self.outcome == "skipped" and bool(self.may_skip and self.may_skip.strip())

    @property
    def required_skip(self) -> bool:
        return self.outcome == "skipped" and not self.allowed_skip


@dataclass(frozen=True)
class InnerReport:
    """What one verifier run wrote. ``collected``/``exitstatus`` are None when not reached."""

    checks: tuple[Check, ...]
    collected: int | None
    exitstatus: int | None

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.checks)

    def summary(self) -> str:
        skipped = self.count("skipped")
        allowed = sum(c.allowed_skip for c in self.checks)
        return (
            f"{len(self.checks)} checks: {self.count('passed')} passed, "
            f"{self.count('failed') + self.count('error')} failed, {skipped} skipped "
            f"({allowed} may_skip, {skipped - allowed} required)"
        )


def load(path: Path) -> InnerReport | None:
    """The report at *path*, or None when the verifier never wrote one."""
    if not path.exists():
        return None
    checks: list[Check] = []
    collected = exitstatus = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        kind = rec.pop("kind")
        if kind == "collected":
            collected = rec["count"]
        elif kind == "check":
            checks.append(Check(**rec))
        elif kind == "finish":
            exitstatus = rec["exitstatus"]
        else:
            raise ValueError(f"{path}: unknown record kind {kind!r}")
    return InnerReport(tuple(checks), collected, exitstatus)


def required_skip_message(check: Check) -> str:
    return (
        f"required check skipped: {check.nodeid}: {check.message}. Every verifier check must "
        f'run; mark it @pytest.mark.{MARKER}("why") only if it may legitimately not run on '
        "some machine"
        + (" (its may_skip has no reason)" if check.may_skip is not None else "")
    )


def judge(report: InnerReport | None, *, verify_ran: bool, where: str = "") -> list[str]:
    """Why the scenario fails on its verifier's account (empty: it does not).

    *verify_ran*: molecule got through its verify step (a missing report is then a fault).
    """
    if report is None:
        if not verify_ran:
            return []
        at = f" at {where}" if where else ""
        missing = (
            f"no verifier report{at}: the verifier did not run or did not load "
            "tests.support.inner_report (PYTEST_PLUGINS in the verifier env of "
            ".config/molecule/config.yml)"
        )
        return [missing]
    problems = []
    if report.collected == 0 or (report.collected is None and not report.checks):
        problems.append("the verifier collected zero checks")
    if report.exitstatus is None:
        problems.append("the verifier session did not finish (killed or timed out)")
    for c in report.checks:
        if c.outcome in ("failed", "error"):
            last = c.message.strip().splitlines()[-1:] or [""]
            problems.append(f"{c.nodeid} {c.outcome}: {last[0]}")
        elif c.required_skip:
            problems.append(required_skip_message(c))
    return problems


# --- outer: inner checks as subtests -----------------------------------------------------


class _SubtestSkipsInSummary:
    """pytest 9.2 hides skipped subtests (even from ``-ra``) unless ``verbosity_subtests``
    is set; an inner skip must show with its reason in a plain ``pytest -ra``."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        if (
            isinstance(report, pytest.SubtestReport)
            and report.when == "call"
            and report.skipped
            and not hasattr(report, "wasxfail")
            and config.get_verbosity(pytest.Config.VERBOSITY_SUBTESTS) == 0
        ):
            # No description in the word: -ra prints the first skip's word for every line.
            return "skipped", "s", "SUBSKIPPED"
        return None


def show_skipped_subtests(config: pytest.Config) -> None:
    name = "railyard-inner-skips"
    if not config.pluginmanager.has_plugin(name):
        config.pluginmanager.register(_SubtestSkipsInSummary(), name)


def to_subtests(subtests, inner: InnerReport) -> None:
    """Each inner check as a subtest: passed, skipped with its reason (may_skip), or failed
    with its message (a failure, or a required check that skipped)."""
    for c in inner.checks:
        with subtests.test(msg=c.nodeid):
            if c.outcome in ("failed", "error"):
                pytest.fail(f"{c.nodeid} {c.outcome}:\n{c.message}", pytrace=False)
            if c.required_skip:
                pytest.fail(required_skip_message(c), pytrace=False)
            if c.outcome == "skipped":
                pytest.skip(f"{c.nodeid}: {c.message} [may_skip: {c.may_skip}]")


# --- inner: the plugin (hooks run only when PYTEST_PLUGINS loads this module) ------------

_may_skip: dict[str, str | None] = {}
_phases: dict[str, list[Any]] = {}


def _path() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def _write(records: Iterable[dict[str, Any]]) -> None:
    path = _path()
    if path is None:
        return
    with path.open("a") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    return reason.removeprefix("Skipped: ")


def _marker_reason(item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    return str(mark.kwargs.get("reason", mark.args[0] if mark.args else ""))


def _check(nodeid: str, reports: list[Any], may_skip: str | None) -> dict[str, Any]:
    outcome, message = "passed", ""
    for rep in reports:
        if rep.failed:
            outcome = "failed" if rep.when == "call" else "error"
            message = f"{rep.when}: {rep.longreprtext}"[-MESSAGE_LIMIT:]
            break
        if rep.skipped and outcome == "passed":
            outcome, message = "skipped", _skip_reason(rep)
    return {"kind": "check", "nodeid": nodeid, "outcome": outcome, "message": message,
            "may_skip": may_skip}


def pytest_sessionstart(session) -> None:
    path = _path()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # this run's report only


def pytest_collectreport(report) -> None:
    if report.failed:
        _write([{"kind": "check", "nodeid": report.nodeid or "<collection>", "outcome": "error",
                 "message": f"collect: {report.longreprtext}"[-MESSAGE_LIMIT:],
                 "may_skip": None}])
    elif report.skipped:  # a module-level skip: its checks never ran
        _write([{"kind": "check", "nodeid": report.nodeid, "outcome": "skipped",
                 "message": _skip_reason(report), "may_skip": None}])


def pytest_collection_finish(session) -> None:
    for item in session.items:
        _may_skip[item.nodeid] = _marker_reason(item)
    _write([{"kind": "collected", "count": len(session.items)}])


def pytest_runtest_logreport(report) -> None:
    _phases.setdefault(report.nodeid, []).append(report)


def pytest_runtest_logfinish(nodeid, location) -> None:
    _write([_check(nodeid, _phases.pop(nodeid, []), _may_skip.get(nodeid))])


def pytest_sessionfinish(session, exitstatus) -> None:
    _write([{"kind": "finish", "exitstatus": int(exitstatus)}])


def pytest_terminal_summary(terminalreporter) -> None:
    """A hand-run verifier (no outer test) still names the required checks that skipped."""
    stats = terminalreporter.stats
    names = []
    for rep in stats.get("skipped", []):
        nodeid = getattr(rep, "nodeid", "")
        if nodeid in _may_skip and not (_may_skip[nodeid] or "").strip():
            names.append(f"{nodeid}: {_skip_reason(rep)}")
    if names:
        terminalreporter.write_sep("=", "required checks that skipped (the scenario fails)")
        for line in names:
            terminalreporter.write_line(line)

"""tests.support.inner_report without podman: the report a verifier writes, the contract
(a required check that skipped fails its scenario, a may_skip one does not), and how the
outer run shows inner checks (subtests, skips with reasons in -ra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import inner_report as ir

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _check(nodeid: str, outcome: str, message: str = "", may_skip: str | None = None) -> dict:
    return {"kind": "check", "nodeid": nodeid, "outcome": outcome, "message": message,
            "may_skip": may_skip}


def _report(*checks: dict, collected: int | None = None, exitstatus: int | None = 0):
    return ir.InnerReport(
        tuple(ir.Check(**{k: v for k, v in c.items() if k != "kind"}) for c in checks),
        len(checks) if collected is None else collected,
        exitstatus,
    )


# --- parsing ------------------------------------------------------------------------------


def test_load_reads_every_record(tmp_path):
    path = _write(
        tmp_path / "r.jsonl",
        {"kind": "collected", "count": 3},
        _check("t.py::a", "passed"),
        _check("t.py::b", "skipped", "no kernel NFS", may_skip="containers share the kernel"),
        _check("t.py::c", "failed", "call: assert 1 == 2"),
        {"kind": "finish", "exitstatus": 1},
    )
    got = ir.load(path)
    assert got.collected == 3 and got.exitstatus == 1
    assert [c.outcome for c in got.checks] == ["passed", "skipped", "failed"]
    assert got.checks[1].allowed_skip and not got.checks[1].required_skip
    assert got.summary() == "3 checks: 1 passed, 1 failed, 1 skipped (1 may_skip, 0 required)"


def test_load_missing_report_is_none(tmp_path):
    assert ir.load(tmp_path / "absent.jsonl") is None


def test_load_refuses_unknown_records(tmp_path):
    with pytest.raises(ValueError, match="unknown record kind 'bogus'"):
        ir.load(_write(tmp_path / "r.jsonl", {"kind": "bogus"}))


def test_a_killed_verifier_leaves_what_it_ran(tmp_path):
    """Checks are written as they end: no finish record, the rest is still there."""
    got = ir.load(_write(tmp_path / "r.jsonl", {"kind": "collected", "count": 2},
                         _check("t.py::a", "passed")))
    assert got.exitstatus is None and len(got.checks) == 1
    assert ir.judge(got, verify_ran=False) == [
        "the verifier session did not finish (killed or timed out)"]


# --- the contract ---------------------------------------------------------------------------


def test_required_skip_fails_naming_check_and_reason():
    report = _report(_check("t.py::a", "passed"), _check("t.py::mounted", "skipped", "no NFS"))
    (problem,) = ir.judge(report, verify_ran=True)
    assert problem.startswith("required check skipped: t.py::mounted: no NFS.")
    assert '@pytest.mark.may_skip("why")' in problem


def test_may_skip_skip_passes():
    report = _report(_check("t.py::a", "passed"),
                     _check("t.py::mounted", "skipped", "no NFS", may_skip="kernel without NFS"))
    assert ir.judge(report, verify_ran=True) == []


def test_may_skip_without_a_reason_does_not_count():
    report = _report(_check("t.py::mounted", "skipped", "no NFS", may_skip=" "))
    (problem,) = ir.judge(report, verify_ran=True)
    assert "t.py::mounted" in problem and "its may_skip has no reason" in problem


def test_may_skip_check_that_ran_is_just_a_pass():
    report = _report(_check("t.py::mounted", "passed", may_skip="kernel without NFS"))
    assert ir.judge(report, verify_ran=True) == []


def test_failures_and_errors_are_named_with_their_last_line():
    report = _report(_check("t.py::a", "failed", "call: x\nAssertionError: boom"),
                     _check("t.py", "error", "collect: ImportError: nope"), exitstatus=1)
    assert ir.judge(report, verify_ran=False) == [
        "t.py::a failed: AssertionError: boom", "t.py error: collect: ImportError: nope"]


def test_zero_checks_fail():
    assert ir.judge(_report(collected=0), verify_ran=True) == [
        "the verifier collected zero checks"]


def test_missing_report_fails_only_when_verify_ran(tmp_path):
    (problem,) = ir.judge(None, verify_ran=True, where="/x/r.jsonl")
    assert problem.startswith("no verifier report at /x/r.jsonl")
    assert ir.judge(None, verify_ran=False) == []  # molecule failed earlier: that is the failure


# --- the inner plugin, in a real pytest run -------------------------------------------------

FAKE_VERIFIER = '''
import pytest

@pytest.fixture
def nfsd():
    pytest.skip("this kernel has no nfsd")

def test_passes():
    pass

def test_required_skip():
    pytest.skip("enroot is not installed")

@pytest.mark.may_skip("no Lustre module in this kernel")
def test_may_skip():
    pytest.skip("lustre not in /proc/filesystems")

@pytest.mark.may_skip(reason="kernel nfsd branch")
def test_fixture_skip(nfsd):
    pass

@pytest.mark.parametrize("kind", [
    "apt", pytest.param("path", marks=pytest.mark.may_skip("the path exists here"))])
def test_param(kind):
    if kind == "path":
        pytest.skip("path exists")

def test_fails():
    assert 1 == 2, "boom"
'''


def _pytest(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """pytest with the repo's pyproject as config (so its pythonpath applies), no PYTHONPATH."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "PYTEST_PLUGINS", "PYTEST_ADDOPTS", ir.ENV)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(ROOT), "-p", "no:cacheprovider", *args],
        env={**clean, **env}, capture_output=True, text=True, timeout=120, check=False)


def test_plugin_writes_the_report(tmp_path):
    test = tmp_path / "test_fake.py"
    test.write_text(FAKE_VERIFIER)
    path = tmp_path / "report.jsonl"
    got = _pytest([str(test)], PYTEST_PLUGINS="tests.support.inner_report", **{ir.ENV: str(path)})
    assert got.returncode == 1, got.stdout + got.stderr
    # A hand-run verifier names its required skips too.
    assert "required checks that skipped" in got.stdout
    report = ir.load(path)
    assert report is not None and report.collected == 7 and report.exitstatus == 1
    by_name = {c.nodeid.split("::")[-1]: c for c in report.checks}
    assert by_name["test_passes"].outcome == "passed"
    assert by_name["test_required_skip"].required_skip
    assert by_name["test_required_skip"].message == "enroot is not installed"
    assert by_name["test_may_skip"].allowed_skip
    assert by_name["test_may_skip"].may_skip == "no Lustre module in this kernel"
    assert by_name["test_may_skip"].message == "lustre not in /proc/filesystems"
    assert by_name["test_fixture_skip"].allowed_skip  # skipped in setup, reason= keyword
    assert by_name["test_fixture_skip"].message == "this kernel has no nfsd"
    assert by_name["test_param[apt]"].outcome == "passed"
    assert by_name["test_param[path]"].allowed_skip
    assert by_name["test_fails"].outcome == "failed" and "boom" in by_name["test_fails"].message
    problems = ir.judge(report, verify_ran=False)
    assert len(problems) == 2
    assert any("test_required_skip: enroot is not installed" in p for p in problems)


def test_plugin_is_quiet_without_the_env(tmp_path):
    test = tmp_path / "test_fake.py"
    test.write_text("def test_ok():\n    pass\n")
    got = _pytest([str(test)], PYTEST_PLUGINS="tests.support.inner_report")
    assert got.returncode == 0, got.stdout + got.stderr
    assert not list(tmp_path.glob("*.jsonl"))


# --- the outer side: subtests and -ra -------------------------------------------------------

OUTER = '''
import json
from pathlib import Path

from tests.support import inner_report as ir

def test_scenario(subtests, request):
    inner = ir.load(Path({path!r}))
    ir.show_skipped_subtests(request.config)
    ir.to_subtests(subtests, inner)
'''


def _outer(tmp_path: Path, *checks: dict) -> subprocess.CompletedProcess:
    path = _write(tmp_path / "report.jsonl", {"kind": "collected", "count": len(checks)},
                  *checks, {"kind": "finish", "exitstatus": 0})
    test = tmp_path / "test_outer.py"
    test.write_text(OUTER.format(path=str(path)))
    return _pytest(["-ra", str(test)])


def test_outer_shows_may_skip_in_ra_and_passes(tmp_path):
    got = _outer(tmp_path, _check("v.py::a", "passed"),
                 _check("v.py::mounted", "skipped", "no NFS here", may_skip="kernel NFS"))
    assert got.returncode == 0, got.stdout
    assert "SUBSKIPPED [1] " in got.stdout
    assert "v.py::mounted: no NFS here [may_skip: kernel NFS]" in got.stdout


def test_outer_fails_a_required_skip_naming_it(tmp_path):
    got = _outer(tmp_path, _check("v.py::a", "passed"),
                 _check("v.py::enroot_runs", "skipped", "enroot is not installed"))
    assert got.returncode == 1, got.stdout
    assert "SUBFAILED[v.py::enroot_runs]" in got.stdout
    assert "required check skipped: v.py::enroot_runs: enroot is not installed" in got.stdout


def test_outer_reports_an_inner_failure_with_its_message(tmp_path):
    got = _outer(tmp_path, _check("v.py::a", "failed", "call: AssertionError: boom"))
    assert got.returncode == 1, got.stdout
    assert "SUBFAILED[v.py::a]" in got.stdout and "AssertionError: boom" in got.stdout


def test_test_molecule_outlives_its_molecule_timeout():
    from tests import test_molecule as tm

    mark = next(m for m in tm.test_molecule.pytestmark if m.name == "timeout")
    assert mark.args[0] > tm.TIMEOUT + tm.DESTROY_TIMEOUT



def test_molecule_run_times_out_with_its_children(tmp_path):
    """The timeout path returns (pytest-timeout does not have to step in), and a child that
    holds molecule's output pipe open goes with the process group."""
    from tests import test_molecule as tm

    pid_file = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {pid_file}; echo started; wait"
    rc, out = tm._run(["sh", "-c", script], tmp_path, dict(os.environ), timeout=2)
    assert rc == "timeout after 2s" and "started" in out
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5  # killed at once; reaped by init shortly after
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists(), "the child outlived the timeout"


def test_the_summary_shows_inner_skips_from_the_start(request):
    """Registered at configure time (tests/conftest.py), so under `pytest -n 2` the
    controller, which writes the `-ra` summary, has it too (it ran no scenario itself)."""
    assert request.config.pluginmanager.has_plugin("railyard-inner-skips")

"""DriftReport: exit codes in one place, sorted and deduplicated, one JSON shape, the table."""

from __future__ import annotations

import io
import json

from railyard import exitcodes
from railyard.drift import compare
from railyard.drift.model import CheckError, DriftReport, Finding, natural_key
from railyard.drift.observed import Observed
from railyard.drift.render import JsonRenderer, TableRenderer, renderer_for
from tests.drift.recorded import clean_observed, files_obs, nodes_obs, slurm_obs

A = Finding("slurm", "gpu010", "node_state", "gpu010 is DOWN", "resume it")
B = Finding("slurm", "gpu2", "node_state", "gpu2 is DOWN", "resume it")
C = Finding("nodes", "gpu3", "missing", "gpu3: container gone", "up --refresh")
U = Finding("files", "gpu4", "unreachable", "gpu4: Ansible cannot reach it", "bring it back")


def test_exit_codes():
    assert DriftReport("lab", ("slurm",)).exit_code == exitcodes.OK
    assert DriftReport("lab", ("slurm",), notes=("role x skipped",)).exit_code == exitcodes.OK
    assert DriftReport("lab", ("slurm",), (A,)).exit_code == exitcodes.DRIFT
    # an unreachable host is drift, never "no drift"
    assert DriftReport("lab", ("files",), (U,)).exit_code == exitcodes.DRIFT
    # an incomplete check is an error, even when it found drift
    err = CheckError("files", "files", "files: ansible-playbook stopped early")
    assert DriftReport("lab", ("files",), (A,), (err,)).exit_code == exitcodes.ERROR
    assert (exitcodes.OK, exitcodes.ERROR, exitcodes.DRIFT) == (0, 1, 2)


def test_sorted_by_layer_then_natural_subject_and_deduplicated():
    r = DriftReport("lab", ("slurm", "nodes", "files"), (A, B, U, C, A))
    assert r.findings == (C, U, B, A)  # nodes, files, slurm; gpu2 before gpu010
    assert r.layers == ("nodes", "files", "slurm")
    assert r.unreachable == ("gpu4",)
    assert natural_key("gpu2") < natural_key("gpu010")


def test_json_shape_and_key_order(lab_plan):
    report = compare(lab_plan, Observed(nodes=nodes_obs(gpu004={"exists": False, "power": "off",
                                                                "reachable": False, "services": ()}),
                                        files=files_obs("drifted")))
    out = io.StringIO()
    JsonRenderer().render(report, out)
    doc = json.loads(out.getvalue())
    assert list(doc) == ["cluster", "status", "exit_code", "layers", "counts", "unreachable", "drifted_roles",
                         "findings", "errors", "notes"]
    assert (doc["cluster"], doc["status"], doc["exit_code"]) == ("lab", "error", 1)
    assert doc["layers"] == ["nodes", "files"]
    assert doc["counts"] == {"findings": 9, "errors": 1, "by_layer": {"nodes": 1, "files": 8}}
    assert doc["unreachable"] == ["gpu004"]
    assert doc["drifted_roles"] == {"munge": ["gpu003"], "nfs_client": ["gpu003"], "nfs_server": ["gpu003"],
                                    "pyxis": ["gpu003"], "slurm_compute": ["gpu003"]}
    assert list(doc["findings"][0]) == ["layer", "subject", "kind", "message", "fix", "expected", "observed",
                                        "role", "path"]
    assert doc["findings"][0] == {
        "layer": "nodes", "subject": "gpu004", "kind": "missing",
        "message": "gpu004: container railyard-lab-gpu004 does not exist",
        "fix": "`railyard up --stack lab --refresh` creates it again",
        "expected": "exists", "observed": "missing", "role": "", "path": "",
    }
    assert doc["errors"] == [{"layer": "files", "subject": "gpu003", "message": report.errors[0].message}]


def test_json_is_byte_stable(lab_plan):
    def render() -> str:
        out = io.StringIO()
        JsonRenderer().render(compare(lab_plan, Observed(slurm=slurm_obs(nodes="drained_down"))), out)
        return out.getvalue()

    assert len({render() for _ in range(5)}) == 1


def test_table_groups_by_layer_and_ends_with_the_verdict(lab_plan):
    report = compare(lab_plan, Observed(nodes=nodes_obs(gpu004={"exists": False, "power": "off",
                                                                "reachable": False, "services": ()}),
                                        slurm=slurm_obs(nodes="drained_down")))
    out = io.StringIO()
    TableRenderer(width=220, color=False).render(report, out)
    text = out.getvalue()
    assert "drift in cluster lab" in text
    assert text.index("nodes") < text.index("gpu004: container railyard-lab-gpu004 does not exist")
    assert text.index("gpu004: container") < text.index("gpu002 is DRAIN (reason: 'maintenance')")
    assert "`scontrol update nodename=gpu002 state=resume` when it may run jobs again" in text
    assert text.rstrip().splitlines()[-1] == "drift: 3 finding(s); layers nodes, slurm"


def test_table_clean_errors_and_notes(lab_plan):
    out = io.StringIO()
    TableRenderer(width=200, color=False).render(compare(lab_plan, clean_observed()), out)
    assert out.getvalue() == "✓ clean: cluster lab matches the spec; layers nodes, files, slurm, kubernetes\n"
    report = DriftReport("lab", ("files",), (), (CheckError("files", "files", "files: it broke"),),
                         ("role x not checked",))
    out = io.StringIO()
    TableRenderer(width=200, color=False).render(report, out)
    assert out.getvalue().splitlines() == [
        "✗ [files] files: it broke",
        "· role x not checked",
        "error: the check is incomplete (1 error(s)); 0 finding(s) so far; layers files",
    ]


def test_one_interface():
    assert isinstance(renderer_for(True), JsonRenderer)
    assert isinstance(renderer_for(False), TableRenderer)


def test_drifted_roles_say_which_role_to_run_where():
    findings = (
        Finding("files", "gpu010", "file_changed", "m", role="slurm_compute", path="/etc/slurm/slurm.conf"),
        Finding("files", "gpu2", "file_missing", "m", role="slurm_compute", path="/etc/slurm/gres.conf"),
        Finding("nodes", "gpu2", "unit_inactive", "m", role="slurm_compute", path="slurmd.service"),
        Finding("nodes", "ctl1", "unit_missing", "m", role="munge", path="munge.service"),
        Finding("files", "gpu4", "unreachable", "m"),
        Finding("slurm", "gpu2", "node_state", "m"),
    )
    assert DriftReport("lab", ("files", "nodes", "slurm"), findings).drifted_roles() == {
        "munge": ("ctl1",), "slurm_compute": ("gpu2", "gpu010")}

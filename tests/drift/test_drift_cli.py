"""``railyard drift``: the sub-command the lead wires into railyard.cli, with collect replaced."""

from __future__ import annotations

import argparse
import json

import pytest

from railyard import exitcodes
from railyard.drift import cli as drift_cli
from railyard.drift import collect as C
from railyard.drift.observed import Observed
from railyard.errors import SpecError
from tests.conftest import LAB
from tests.drift.recorded import clean_observed, slurm_obs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="railyard")
    drift_cli.add_commands(p.add_subparsers(dest="command", required=True))
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


@pytest.fixture
def observed(monkeypatch):
    """What collect returns; records the layers and secrets it was asked for."""
    box: dict = {"value": clean_observed(), "calls": []}

    def fake_collect(plan, layers, runner=None, **kw):
        box["calls"].append((tuple(layers), kw.get("secrets")))
        return box["value"]

    monkeypatch.setattr(C, "collect", fake_collect)
    return box


def test_arguments():
    args = parser().parse_args(["drift", "cluster.yaml", "--json", "--layers", "slurm,files", "--stack", "lab"])
    assert (args.spec, args.json, args.layers, args.stack) == ("cluster.yaml", True, "slurm,files", "lab")
    assert parser().parse_args(["drift", "x.yaml"]).layers == "nodes,files,slurm,kubernetes"


def test_parse_layers():
    assert drift_cli.parse_layers("files, slurm,files") == ("files", "slurm")
    with pytest.raises(ValueError, match="unknown layer.*dns; choose from nodes,files,slurm,kubernetes"):
        drift_cli.parse_layers("slurm,dns")
    with pytest.raises(ValueError, match="none given"):
        drift_cli.parse_layers(",")


def test_clean_exits_0(observed, capsys):
    assert run(["drift", str(LAB)]) == exitcodes.OK
    assert "✓ clean: cluster lab matches the spec" in capsys.readouterr().out


def test_drift_exits_2_with_json(observed, capsys):
    observed["value"] = Observed(slurm=slurm_obs(nodes="drained_down"))
    assert run(["drift", str(LAB), "--json", "--layers", "slurm"]) == exitcodes.DRIFT
    doc = json.loads(capsys.readouterr().out)
    assert (doc["status"], doc["exit_code"]) == ("drift", 2)
    assert [f["subject"] for f in doc["findings"]] == ["gpu002", "gpu003"]
    assert observed["calls"] == [(("slurm",), {})]


def test_bad_layers_exit_1_before_collecting(observed, capsys):
    assert run(["drift", str(LAB), "--layers", "dns"]) == exitcodes.ERROR
    assert "unknown layer(s) dns" in capsys.readouterr().err
    assert observed["calls"] == []


def test_stack_secrets_reach_the_files_layer(observed, monkeypatch):
    monkeypatch.setattr(C, "stack_secrets", lambda stack: {"munge": "a2V5"})
    assert run(["drift", str(LAB), "--layers", "files", "--stack", "lab", "--json"]) == exitcodes.OK
    assert observed["calls"] == [(("files",), {"munge": "a2V5"})]


def test_unreadable_stack_is_an_error(observed, monkeypatch, capsys):
    def fail(stack):
        raise C.CollectorError(f"cannot read stack {stack}: no stack named 'prod' found")

    monkeypatch.setattr(C, "stack_secrets", fail)
    assert run(["drift", str(LAB), "--layers", "files", "--stack", "prod", "--json"]) == exitcodes.ERROR
    doc = json.loads(capsys.readouterr().out)
    assert doc["errors"] == [{"layer": "files", "subject": "secrets",
                              "message": "files: cannot read stack prod: no stack named 'prod' found"}]
    assert any(n.startswith("stack prod:") for n in doc["notes"])  # no Pulumi.prod.yaml here


def test_bad_spec_raises_for_railyard_main_to_report(tmp_path, observed):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(LAB.read_text().replace("memory_mb: 1000}", "memory_mb: -5}", 1))
    with pytest.raises(SpecError, match="memory_mb"):
        run(["drift", str(bad)])
    assert observed["calls"] == []

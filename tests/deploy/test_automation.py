"""The Automation API edge: a bad spec stops before the engine; settings are found. No engine run."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from railyard import lifecycle
from railyard.apply import engine
from railyard.deploy import automation
from railyard.errors import SpecError
from tests.conftest import LAB, ROOT


def _work_dir(tmp_path: Path, spec: Path) -> Path:
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.lab.yaml").write_text(f"config:\n  railyard:spec: {spec}\n")
    return tmp_path


def test_a_spec_error_stops_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("cidr: 10.77.0.0/24", "cidr: 10.77.0.0/29"))
    work = _work_dir(tmp_path, bad)

    def no_engine() -> Path:
        raise AssertionError("the engine was looked for: the spec error came too late")

    monkeypatch.setattr(automation, "pulumi_bin", no_engine)
    for verb in (lifecycle.up, automation.up, automation.preview, automation.refresh):
        with pytest.raises(SpecError) as exc:
            verb("lab", work_dir=work)
        assert "nothing was applied" in str(exc.value)
        assert "network.management.cidr" in str(exc.value)
    assert not (work / ".pulumi-state").exists()


def test_the_cli_verbs_raise_spec_errors_for_the_cli_to_report(tmp_path: Path, monkeypatch) -> None:
    """railyard.cli.main turns a SpecError into its report (and exit 1)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("  domain: lab.railyard.test\n", ""))
    monkeypatch.setattr(engine, "stack_spec", lambda stack, work_dir: bad)
    monkeypatch.setattr(automation, "pulumi_bin", lambda: pytest.fail("the engine was looked for"))
    parser = argparse.ArgumentParser()
    lifecycle.add_commands(parser.add_subparsers(dest="command"))
    for argv in (["up", "--yes"], ["preview"], ["refresh", "--yes"]):
        args = parser.parse_args(argv)
        with pytest.raises(SpecError, match="required key 'domain' is missing"):
            args.func(args)


def test_commands_and_flags() -> None:
    parser = argparse.ArgumentParser()
    lifecycle.add_commands(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["preview", "--expect-no-changes"]).expect_no_changes
    assert parser.parse_args(["refresh", "--stack", "x", "--yes", "--expect-no-changes"]).stack == "x"
    up = parser.parse_args(["up", "--yes", "--refresh"])
    assert up.yes and up.refresh and up.stack == "lab"
    assert parser.parse_args(["destroy", "-y"]).yes


def test_stack_spec_and_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine.stack_spec("lab", ROOT) == ROOT / "inventories" / "lab" / "cluster.yaml"
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert engine.backend_dir(ROOT) == ROOT / ".pulumi-state"
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}/state")
    assert engine.backend_dir(ROOT) == tmp_path / "state"
    with pytest.raises(engine.AutomationError, match="no Pulumi.nope.yaml"):
        engine.stack_spec("nope", ROOT)


def test_lab_passphrase_default_only_for_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    env = engine.engine_env("lab", Path("/opt/pulumi/bin"))
    assert env["PULUMI_CONFIG_PASSPHRASE"] == "railyard-lab"
    assert env["PATH"].startswith("/opt/pulumi/bin:")
    with pytest.raises(engine.AutomationError, match="PULUMI_CONFIG_PASSPHRASE"):
        engine.engine_env("prod", Path("/opt/pulumi/bin"))


def test_committed_lab_stack_settings() -> None:
    import yaml

    settings = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())
    assert settings["config"] == {"railyard:spec": "inventories/lab/cluster.yaml"}
    assert settings["encryptionsalt"].startswith("v1:")
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "railyard" and project["runtime"]["name"] == "python"
    assert project["backend"]["url"] == "file://./.pulumi-state"


def test_up_records_the_workers_runtimes_after_the_update(monkeypatch) -> None:
    """What drift compares containerd with (railyard.drift.applied) is written when an up
    has finished, and only then: an update that raised records nothing."""
    from railyard.load import load_plan

    plan = load_plan(LAB)
    calls: list[str] = []
    monkeypatch.setattr(lifecycle, "load_stack_plan", lambda stack, work_dir: plan)
    monkeypatch.setattr(automation, "deployed", lambda *_a, **_k: False)
    monkeypatch.setattr(automation, "up", lambda *_a, **_k: calls.append("up") or "result")
    monkeypatch.setattr(lifecycle, "record_applied", lambda p: calls.append(f"record {p.name}") or "recorded")
    lines: list[str] = []
    assert lifecycle.up("lab", on_output=lines.append) == "result"
    assert calls == ["up", "record lab"]
    assert lines == ["railyard: recorded"]

    def fails(*_a, **_k):
        raise RuntimeError("engine failed")

    monkeypatch.setattr(automation, "up", fails)
    calls.clear()
    with pytest.raises(RuntimeError):
        lifecycle.up("lab", on_output=lines.append)
    assert calls == []

"""Secret references: resolved from env and files, errors that name the reference, never the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from railyard.apply.secrets import SecretRefError, config_key, parse_ref, resolve


def test_env_and_file(tmp_path: Path) -> None:
    assert resolve("env:BMC_PW", {"BMC_PW": "hunter2"}) == "hunter2"
    f = tmp_path / "pw"
    f.write_text("hunter2\n")
    f.chmod(0o600)
    assert resolve(f"file:{f}") == "hunter2"


def test_errors_name_the_reference_not_the_value(tmp_path: Path) -> None:
    with pytest.raises(SecretRefError, match="environment variable BMC_PW is not set"):
        resolve("env:BMC_PW", {})
    with pytest.raises(SecretRefError, match="cannot read"):
        resolve(f"file:{tmp_path}/missing")
    f = tmp_path / "open"
    f.write_text("hunter2")
    f.chmod(0o644)
    with pytest.raises(SecretRefError, match="readable by others") as exc:
        resolve(f"file:{f}")
    assert "hunter2" not in str(exc.value)
    with pytest.raises(SecretRefError, match="not a secret reference"):
        parse_ref("hunter2")
    with pytest.raises(SecretRefError, match="resolved by the Pulumi program"):
        resolve("pulumi:bmcPassword")


def test_config_keys() -> None:
    assert config_key("bmcPassword") == ("railyard", "bmcPassword")
    assert config_key("site:bmcPassword") == ("site", "bmcPassword")

"""ansible-lint (production profile) and yamllint over roles/ and molecule/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TARGETS = [p for p in ("roles", "molecule") if (ROOT / p).is_dir()]


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed")
    return found


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home()), "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_yamllint():
    res = _run([_tool("yamllint"), "--strict", "-c", str(ROOT / ".yamllint"), *TARGETS, ".config/molecule"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_ansible_lint_production():
    res = _run([_tool("ansible-lint"), "--profile", "production", "--offline", "-c", str(ROOT / ".ansible-lint"), *TARGETS])
    assert res.returncode == 0, res.stdout[-8000:] + res.stderr[-4000:]

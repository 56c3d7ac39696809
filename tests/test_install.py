"""`pip install .` into a clean venv, outside the checkout: validate and render work from the
installed package alone (its templates are package data)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from railyard.load import load_plan
from railyard.render import digest, render

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "inventories" / "lab" / "cluster.yaml"


@pytest.mark.timeout(600)  # a venv, and the pinned dependencies from pip's cache or PyPI
def test_pip_install_outside_the_checkout_validates_and_renders(tmp_path: Path) -> None:
    # the project as an sdist would carry it: no roles, no tests, no checkout around it
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "railyard", src / "railyard", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # the pins of requirements.txt as constraints (pip takes no extras there)
    pins = tmp_path / "constraints.txt"
    pins.write_text("".join(re.sub(r"\[.*?\]", "", line) + "\n" for line in
                            (ROOT / "requirements.txt").read_text().splitlines() if "==" in line))
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                          "-c", str(pins), str(src)],
                         capture_output=True, text=True, timeout=480, check=False)
    assert pip.returncode == 0, pip.stderr[-2000:]
    shutil.rmtree(src)  # only the installed package is left

    work = tmp_path / "elsewhere"
    work.mkdir()
    spec = work / "cluster.yaml"
    shutil.copy(SPEC, spec)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    railyard = str(venv / "bin" / "railyard")
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import railyard, sys; print(railyard.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env, timeout=60, check=True)
    assert where.stdout.startswith(str(venv)), where.stdout  # not the checkout's package

    validate = subprocess.run([railyard, "validate", str(spec)], capture_output=True, text=True, cwd=work,
                              env=env, timeout=120, check=False)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    out = work / "out"
    rendered = subprocess.run([railyard, "render", str(spec), "-o", str(out)], capture_output=True, text=True,
                              cwd=work, env=env, timeout=120, check=False)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    # the same artifacts as the checkout renders
    expected = render(load_plan(SPEC))
    assert f"(digest {digest(expected)[:12]})" in rendered.stdout
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert [f for f in files if not f.startswith(".railyard-")] == sorted(expected)  # less render's own marker

"""Every molecule scenario in the repo, one test each: `molecule test -s <name>`.

Discovers roles/*/molecule/*/molecule.yml (run with cwd roles/<role>) and
molecule/*/molecule.yml (cwd the repo), so scenarios added later are picked up without
touching this file.  Also guards against copy-paste drift: a scenario's platforms must be
the plan's nodes, with the plan's groups and addresses, and the shared platform keys.

Scenarios must run one after another: platforms are named by node name (ctl1, gpu001,
...) so that containers resolve each other by name, and two scenarios using one node name
cannot run at once on a machine.  For side-by-side runs (two checkouts), give each its own
RAILYARD_MOLECULE_NETWORK, RAILYARD_MOLECULE_NET, RAILYARD_MOLECULE_STATE and podman store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import molecule as support

ROOT = support.ROOT
SCENARIOS = support.scenarios()
VENV_BIN = Path(sys.executable).parent
TAIL = 120  # lines of molecule output shown on failure
TIMEOUT = int(os.environ.get("RAILYARD_MOLECULE_TIMEOUT", "1200"))


def _base() -> dict:
    return yaml.safe_load(support.BASE_CONFIG.read_text())


def _interpolate(value):
    """Molecule's ${VAR:-default} with the defaults (what CI runs)."""
    if isinstance(value, str):
        return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m.group(1), m.group(2)), value)
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


def test_scenarios_found():
    names = {s.id for s in SCENARIOS}
    assert "molecule/slurm_cluster" in names
    for role in ("common", "munge", "slurm_controller", "slurm_compute", "slurm_login"):
        assert f"roles/{role}/molecule/default" in names


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_platforms_match_the_plan(scenario):
    """Platforms = plan nodes: name, address (molecule CIDR) and groups, plus shared keys."""
    config = scenario.config()
    platforms = _interpolate(config.get("platforms") or _base()["platforms"])
    base = _interpolate(_base()["platforms"][0])
    variant = (config.get("provisioner", {}).get("inventory", {}).get("group_vars", {})
               .get("all", {}).get("railyard_molecule_variant", "lab"))
    if str(variant).startswith("${"):
        variant = "lab"
    plan = support.plan_summary(variant)
    nodes = {n["name"]: n for n in plan["nodes"]}
    for p in platforms:
        for key in ("image", "pre_build_image", "command", "systemd"):
            assert p.get(key) == base[key], f"{scenario.id} {p['name']}: {key}={p.get(key)!r}, base has {base[key]!r}"
        assert base["extra_opts"][0] in (p.get("extra_opts") or []), f"{scenario.id} {p['name']}: not on the molecule network"
        if p["name"] == "instance":
            continue  # the base's default platform: a scenario without plan nodes
        assert p["name"] in nodes, f"{scenario.id}: platform {p['name']} is not a node of the plan"
        want = support.platform(p["name"], plan)
        assert p.get("ip") == want["ip"], f"{scenario.id} {p['name']}: ip {p.get('ip')} != plan {want['ip']}"
        assert sorted(p.get("groups") or []) == want["groups"], (
            f"{scenario.id} {p['name']}: groups {sorted(p.get('groups') or [])} != plan {want['groups']}"
        )


def _skip_reason() -> str | None:
    if os.environ.get("RAILYARD_SKIP_MOLECULE"):
        return "RAILYARD_SKIP_MOLECULE is set"
    return support.podman_available()


@pytest.mark.podman
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_molecule(scenario):
    reason = _skip_reason()
    if reason:
        print(f"SKIP {scenario.id}: {reason}")
        pytest.skip(reason)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1"}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [str(VENV_BIN / "molecule"), "test", "-s", scenario.name],
            cwd=scenario.cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc = f"timeout after {TIMEOUT}s"
        subprocess.run([str(VENV_BIN / "molecule"), "destroy", "-s", scenario.name],
                       cwd=scenario.cwd, env=env, capture_output=True, check=False)
    finally:
        support.clean()
    took = time.monotonic() - start
    print(f"{scenario.id}: molecule test took {took:.0f}s")
    if rc != 0:
        tail = "\n".join(out.splitlines()[-TAIL:])
        pytest.fail(f"molecule test -s {scenario.name} in {scenario.cwd} failed ({rc}):\n{tail}")

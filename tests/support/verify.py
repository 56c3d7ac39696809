"""What molecule's testinfra verifiers share: node checks that explain their failures.

Verifiers import it as ``from tests.support import verify`` (pyproject's pytest
``pythonpath`` puts the repo on sys.path, and molecule's pytest finds that config).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from railyard.render import SLURM_CONFIG_FILES
from tests.support import molecule as support

VARIANT = os.environ.get("RAILYARD_MOLECULE_VARIANT", "lab")
ARTIFACTS = support.artifacts_dir(VARIANT)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal(host, unit: str) -> str:
    """The unit's last journal lines, to append to a failure message."""
    out = host.run(f"journalctl -u {unit} --no-pager -n 50")
    return f"\n--- journalctl -u {unit} on {host.backend.get_hostname()} ---\n{out.stdout}{out.stderr}"


def wait(pred, timeout: float, step: float = 0.5):
    """(seconds it took, what *pred* returned) once *pred* returns something true within
    *timeout* seconds, else (None, None)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return time.monotonic() - t0, got
        time.sleep(step)
    return None, None


def assert_running(host, unit: str) -> None:
    svc = host.service(unit)
    if not (svc.is_running and svc.is_enabled):
        pytest.fail(f"{unit}: running={svc.is_running} enabled={svc.is_enabled}{journal(host, unit)}")


def rendered_slurm_files() -> tuple[str, ...]:
    """The Slurm configuration files the scenario's render wrote, which the Slurm roles install."""
    names = tuple(n for n in SLURM_CONFIG_FILES if (ARTIFACTS / "slurm" / n).is_file())
    assert "slurm.conf" in names, f"no rendered slurm.conf in {ARTIFACTS / 'slurm'}"
    return names


def assert_slurm_files(host, names: tuple[str, ...] | None = None) -> None:
    """/etc/slurm/<name> is the rendered file, byte for byte, root-owned and 0644: each of
    ``names``, by default every Slurm configuration file the render wrote."""
    for name in rendered_slurm_files() if names is None else names:
        f = host.file(f"/etc/slurm/{name}")
        assert f.exists and f.sha256sum == sha256(ARTIFACTS / "slurm" / name), name
        assert f.mode == 0o644 and f.user == "root", name


def run_role(role: str, extra_vars: dict, tags: str, check: bool = True, hosts: str = "all",
             vars_files: tuple[str, ...] = ()) -> dict:
    """Run *role* (only *tags*, in check mode unless told) against the scenario's instances
    (*hosts*, a pattern), with the play's *vars_files* (as a converge.yml names them).

    Returns the exit code, the last failed task's name and message (the one that stopped
    the play: a failure a block rescued comes before it), every failed message in order (a
    loop's failed items each, not its summary) as ``msgs``, and how many tasks changed.
    Check mode with an install tag leaves the instance as converge left it.
    """
    playbook = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / f"{role}-source.yml"
    play = {"name": "source", "hosts": hosts, "gather_facts": False, "roles": [role]}
    if vars_files:
        play["vars_files"] = list(vars_files)
    playbook.write_text(yaml.safe_dump([play]))
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    out = subprocess.run(
        ["ansible-playbook", "-i", inventory, *(["--check"] if check else []),
         "--tags", tags, "-e", json.dumps(extra_vars), str(playbook)],
        check=False, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
    )
    # Callbacks enabled in ansible.cfg (profile_tasks) print around the JSON document.
    start = 0 if out.stdout.startswith("{") else out.stdout.index("\n{") + 1
    result, _ = json.JSONDecoder().raw_decode(out.stdout, start)
    changed = sum(s["changed"] for s in result["stats"].values())
    failed = [(task["task"]["name"], res) for task in result["plays"][0]["tasks"]
              for res in task["hosts"].values() if res.get("failed")]
    msgs = [item.get("msg", "") for _name, res in failed for item in res.get("results", [res]) if item.get("failed")]
    if failed:
        return {"rc": out.returncode, "task": failed[-1][0], "msg": failed[-1][1].get("msg", ""), "msgs": msgs,
                "changed": changed}
    return {"rc": out.returncode, "task": None, "msg": "", "msgs": [], "changed": changed}

"""Every molecule scenario in the repo, one test each: `molecule test -s <name>`.

Discovers roles/*/molecule/*/molecule.yml (run with cwd roles/<role>) and
molecule/*/molecule.yml (cwd the repo), so scenarios added later are picked up without
touching this file.  Also guards against copy-paste drift: a scenario's platforms must be
the plan's nodes, with the plan's groups and addresses, and the shared platform keys.

Each scenario's verifier writes a report (tests/support/inner_report.py, loaded by the base
config's verifier env): its counts are printed, every inner check becomes a subtest (inner
skips show in -ra with their reasons), and a check without @pytest.mark.may_skip that
skipped fails the scenario.

Platforms are named by node name (ctl1, gpu001, ...) so that containers resolve each other
by name, and two scenarios using one node name cannot run at once on a machine: scenarios
linked by a shared name form a lane and run one after another; two lanes can run side by
side, each on its own network, subnet and state dir (tests.support.molecule.Lane; `make
test` sends each lane to a worker as one unit). For side-by-side checkouts, give each its own
RAILYARD_MOLECULE_NETWORK, RAILYARD_MOLECULE_NET, RAILYARD_MOLECULE_STATE and podman store.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.support import inner_report
from tests.support import molecule as support

ROOT = support.ROOT
SCENARIOS = support.scenarios()
VENV_BIN = Path(sys.executable).parent
TAIL = 120  # lines of molecule output shown on failure
# One scenario's limit. molecule/kubernetes took 767-872 s in CI runs beside the lab e2e, 1256 s
# (killed at 1200) in one where the whole machine ran about twice as slow, 1483 s on
# 2026-12-07 before its batch-policy proofs, and passed 1800 s beside both the lab and the
# Slurm lane (three workers).
TIMEOUT = int(os.environ.get("RAILYARD_MOLECULE_TIMEOUT", "2400"))
DESTROY_TIMEOUT = 300  # `molecule destroy` after a timed-out run


def _base() -> dict:
    return yaml.safe_load(support.BASE_CONFIG.read_text())


def test_scenarios_found():
    names = {s.id for s in SCENARIOS}
    # The Slurm roles' own checks (munge, slurmdbd, slurm_controller, slurm_compute,
    # slurm_login) run in molecule/slurm_cluster, and nfs_server's and nfs_client's in
    # molecule/nfs: scenarios of their own made, converged and destroyed the same nodes again.
    assert {"molecule/slurm_cluster", "molecule/nfs", "molecule/kubernetes", "roles/common/molecule/default",
            "roles/pyxis/molecule/default"} <= names
    for scenario, files in (("molecule/slurm_cluster", ("test_munge.py", "test_slurmdbd.py", "test_controller.py",
                                                        "test_compute.py", "test_login.py")),
                            ("molecule/nfs", ("test_server.py", "test_client.py"))):
        assert all((ROOT / scenario / "tests" / f).is_file() for f in files), scenario


def test_lanes_share_no_container_name_network_or_state():
    lanes = support.lanes(SCENARIOS)
    assert sorted(s for lane in lanes for s in lane.scenarios) == sorted(s.id for s in SCENARIOS)
    by_id = {s.id: s for s in SCENARIOS}
    names = [set().union(*(support.node_names(by_id[s]) for s in lane.scenarios)) for lane in lanes]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not a & b, f"two lanes create {sorted(a & b)}: they would run side by side"
    for key in ("RAILYARD_MOLECULE_NETWORK", "RAILYARD_MOLECULE_NET", "RAILYARD_MOLECULE_STATE"):
        values = [lane.env()[key] for lane in lanes]
        assert len(set(values)) == len(values), (key, values)
    # literals: the Slurm scenarios share ctl1/gpu00x; the Kubernetes one shares no name
    assert support.lane_of("molecule/slurm_cluster", SCENARIOS) == support.lane_of("roles/pyxis/molecule/default", SCENARIOS)
    assert support.lane_of("molecule/kubernetes", SCENARIOS).scenarios == ("molecule/kubernetes",)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_platforms_match_the_plan(scenario):
    """Platforms = plan nodes: name, address (molecule CIDR) and groups, plus shared keys."""
    config = scenario.config()
    platforms = support.interpolated(config.get("platforms") or _base()["platforms"])
    base = support.interpolated(_base()["platforms"][0])
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


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_sequence_converges_twice_and_verifies(scenario):
    """Every scenario converges, converges again with zero changes and verifies. One that
    renders another variant than the lab's also runs `check`: the lab e2e's drift check
    proves check mode only for the lab's own configs (see .config/molecule/config.yml)."""
    sequence = (scenario.config().get("scenario", {}).get("test_sequence")
                or _base()["scenario"]["test_sequence"])
    assert [s for s in sequence if s in ("converge", "idempotence", "verify")] == \
        ["converge", "idempotence", "verify"], sequence
    variant = support.interpolated(scenario.config().get("verifier", {}).get("env", {})
                                   .get("RAILYARD_MOLECULE_VARIANT", "lab"))
    if variant != "lab":
        assert sequence.index("idempotence") < sequence.index("check") < sequence.index("verify"), \
            f"{scenario.id} (variant {variant}): {sequence}"


def _skip_reason() -> str | None:
    if os.environ.get("RAILYARD_SKIP_MOLECULE"):
        return "RAILYARD_SKIP_MOLECULE is set"
    return support.podman_available()


def _kill(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


STEP = re.compile(r"\[[^]>]+ > (\w+)\] Executing")  # molecule's "[<scenario> > <step>] Executing"


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float,
         steps: dict[str, float] | None = None) -> tuple[int | str, str]:
    """(exit code or "timeout after Ns", output); ``steps`` gets each molecule step's wall
    time, in the order they ran. On timeout the whole process group goes (molecule's
    ansible and pytest children too), so their pipes close and this returns."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    marks: list[tuple[str, float]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = STEP.search(line)
            if m:
                marks.append((m.group(1), time.monotonic()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        try:
            proc.wait(timeout=timeout)
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            _kill(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill(proc, signal.SIGKILL)
                proc.wait()
            rc = f"timeout after {timeout:.0f}s"
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:  # interrupted (pytest-timeout, ^C): leave nothing running
            _kill(proc, signal.SIGKILL)
            proc.wait()
    if steps is not None:
        ends = [t for _, t in marks[1:]] + [time.monotonic()]
        for (step, began), ended in zip(marks, ends):
            steps[step] = steps.get(step, 0.0) + ended - began  # destroy runs twice
    return rc, "".join(lines)


def _failed_tasks(out: str, most: int = 5, lines: int = 40) -> str:
    """Each failed task's block (its TASK line, then ansible's `fatal:`/`failed:` result),
    which the tail alone loses behind molecule's clean-up output."""
    text = out.splitlines()
    blocks = []
    task = ""
    for i, line in enumerate(text):
        if line.startswith("TASK ["):
            task = line
        elif line.startswith(("fatal: [", "failed: [")) and len(blocks) < most:
            block = [line]
            for more in text[i + 1:i + lines]:
                if not more.startswith((" ", "\t")):
                    break
                block.append(more)
            blocks.append("\n".join([task, *block]))
    return "".join(f"\n--- failed task\n{b}" for b in blocks)


def _runs_verify(scenario) -> bool:
    sequence = (scenario.config().get("scenario", {}).get("test_sequence")
                or _base()["scenario"]["test_sequence"])
    return "verify" in sequence


@pytest.mark.podman
# Above the molecule run's own limit plus the destroy after it, so that path still reports.
@pytest.mark.timeout(TIMEOUT + DESTROY_TIMEOUT + 120)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_molecule(scenario, subtests, request, tmp_path):
    """`molecule test`, then every verifier check as a subtest (see tests.support.inner_report):
    inner skips show in -ra with their reasons; a required check that skipped fails."""
    reason = _skip_reason()
    if reason:
        print(f"SKIP {scenario.id}: {reason}")
        pytest.skip(reason)
    report_path = tmp_path / "inner-report.jsonl"
    lane = support.lane_of(scenario.id, SCENARIOS).env()
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0", "NO_COLOR": "1",
           inner_report.ENV: str(report_path), **lane}
    molecule = str(VENV_BIN / "molecule")
    start = time.monotonic()
    steps: dict[str, float] = {}
    try:
        rc, out = _run([molecule, "test", "-s", scenario.name], scenario.cwd, env, TIMEOUT, steps)
        if isinstance(rc, str):  # timed out: its containers are still there
            _run([molecule, "destroy", "-s", scenario.name], scenario.cwd, env, DESTROY_TIMEOUT)
    finally:
        support.clean(Path(lane["RAILYARD_MOLECULE_STATE"]), lane["RAILYARD_MOLECULE_NETWORK"])
    took = time.monotonic() - start
    inner = inner_report.load(report_path)
    print(f"{scenario.id}: molecule test took {took:.0f}s ("
          + ", ".join(f"{step} {secs:.0f}s" for step, secs in steps.items())
          + "); verifier: " + (inner.summary() if inner else "no report"))
    request.node.user_properties.append(("molecule_steps", steps))
    problems = inner_report.judge(inner, verify_ran=rc == 0 and _runs_verify(scenario),
                                  where=str(report_path))
    if inner is not None:
        inner_report.show_skipped_subtests(request.config)
        inner_report.to_subtests(subtests, inner)
    if rc != 0:
        tail = "\n".join(out.splitlines()[-TAIL:])
        pytest.fail(f"molecule test -s {scenario.name} in {scenario.cwd} failed ({rc})"
                    + "".join(f"\n- {p}" for p in problems) + _failed_tasks(out) + f"\n{tail}", pytrace=False)
    if problems:
        pytest.fail(f"{scenario.id}: the verifier's results fail the scenario:"
                    + "".join(f"\n- {p}" for p in problems), pytrace=False)

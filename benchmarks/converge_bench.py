"""Converge time of the slurm_cluster scenario: first run, second run (0 changed), scaling.

    .venv/bin/python benchmarks/converge_bench.py                 # 4 and 16 compute nodes
    .venv/bin/python benchmarks/converge_bench.py --sizes 4       # the lab only
    .venv/bin/python benchmarks/converge_bench.py --no-pipelining --linear   # ablations

For each size it generates a molecule scenario equal to molecule/slurm_cluster (same
converge playbook, same shared base config) whose platforms come from the molecule render
of the spec: the lab (4 GPU nodes, 2 SUs) or the lab with 16 GPU nodes and the SUs re-cut
into 4 of 4 (tests/support/molecule.py: variant scale16).  It then times
``molecule create``, ``molecule converge`` twice and checks the second reports 0 changed,
and destroys the containers.  Targets (issue 3, image cached, packages from the Debian
mirror): first converge <= 120 s, second <= 30 s.

Ablations (what each speed measure buys): ``--no-pipelining`` uses containers.podman's
stock connection (no pipelining), ``--linear`` Ansible's linear strategy (without Mitogen)
instead of mitogen_free, the strategy `railyard up` uses.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import molecule as support

BENCH = ROOT / ".railyard" / "bench"
VARIANTS = {4: "lab", 16: "scale16"}
RECAP = re.compile(r"^\s*(?:\S+\s+)?(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def scenario(size: int, linear: bool, pipelining: bool) -> tuple[Path, str, dict[str, str]]:
    """Write .railyard/bench/molecule/<name>/ and return (project dir, name, env)."""
    variant = VARIANTS[size]
    plan = support.plan_summary(variant) if (support.artifacts_dir(variant) / "plan.json").exists() else None
    if plan is None:
        support.render(variant)
        plan = support.plan_summary(variant)
    groups = plan["inventory_groups"]
    nodes = groups["slurm_controller"] + groups["slurm_login"] + groups["slurm_compute"]
    base = yaml.safe_load(support.BASE_CONFIG.read_text())["platforms"][0]
    hostvars = support.artifacts_dir(variant) / "ansible" / "host_vars"
    platforms = []
    for node in nodes:
        p = {k: v for k, v in base.items() if k != "name"}
        p.update(support.platform(node, plan))
        p["extra_opts"] = [f"--network={support.NETWORK}"]
        devices = (yaml.safe_load((hostvars / f"{node}.json").read_text()).get("railyard_gpus") or {})
        if devices.get("stand_in"):
            p["devices"] = [f"/dev/null:{d}:rwm" for d in devices["devices"]]
        platforms.append(p)
    name = f"bench_{size}" + ("_linear" if linear else "") + ("" if pipelining else "_nopipe")
    sdir = BENCH / "molecule" / name
    if sdir.exists():
        shutil.rmtree(sdir)
    sdir.mkdir(parents=True)
    conn = str(ROOT / "plugins/connection") if pipelining else str(sdir / "none")
    config = {
        "platforms": platforms,
        "ansible": {"env": {"ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_CONNECTION_PLUGINS": conn}},
    }
    (sdir / "molecule.yml").write_text("---\n" + yaml.safe_dump(config, sort_keys=False))
    converge = (ROOT / "molecule/slurm_cluster/converge.yml").read_text()
    # the copy lives elsewhere: the lab spec by its absolute path, and each edit must apply
    edits = {"playbook_dir ~ '/../../inventories/lab/cluster.yaml'": f"'{ROOT / 'inventories/lab/cluster.yaml'}'"}
    if linear:
        edits["strategy: mitogen_free"] = "strategy: linear"
    for old, new in edits.items():
        if old not in converge:
            raise SystemExit(f"molecule/slurm_cluster/converge.yml no longer has {old!r}: update this bench")
        converge = converge.replace(old, new)
    (sdir / "converge.yml").write_text(converge)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAILYARD_MOLECULE_VARIANT": variant,
        "RAILYARD_MOLECULE_STATE": str(support.STATE),
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    }
    return BENCH, name, env


def molecule(cmd: str, cwd: Path, name: str, env: dict[str, str], *extra: str) -> tuple[float, str]:
    start = time.monotonic()
    argv = ["molecule", cmd, "-s", name, *(["--", *extra] if extra else [])]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:  # the failed tasks first: -vvv's tail is the timing table
        lines = out.splitlines()
        first = next((i for i, line in enumerate(lines) if "FAILED!" in line), len(lines))
        print("\n".join([*lines[first:first + 40], "...", *lines[-20:]]), file=sys.stderr)
        raise SystemExit(f"molecule {cmd} -s {name} failed ({proc.returncode})")
    return took, out


def changed(out: str) -> int:
    return sum(int(m.group(3)) for m in RECAP.finditer(out))


def execs(out: str) -> int:
    """`podman exec` round trips Ansible made (from -vvv's RUN lines): the cost model."""
    return sum(1 for line in out.splitlines() if "RUN [b'" in line and "b'exec'" in line)


def run(size: int, linear: bool, pipelining: bool) -> dict[str, float | int]:
    cwd, name, env = scenario(size, linear, pipelining)
    support.prepare(VARIANTS[size])
    try:
        molecule("destroy", cwd, name, env)
        t_create, _ = molecule("create", cwd, name, env)
        t1, out1 = molecule("converge", cwd, name, env, "-vvv")
        t2, out2 = molecule("converge", cwd, name, env, "-vvv")
    finally:
        molecule("destroy", cwd, name, env)
    return {"compute": size, "hosts": size + 2, "create": t_create, "first": t1, "second": t2,
            "changed_first": changed(out1), "changed_second": changed(out2),
            "execs_first": execs(out1), "execs_second": execs(out2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 16], choices=sorted(VARIANTS))
    ap.add_argument("--linear", action="store_true", help="linear strategy instead of free")
    ap.add_argument("--no-pipelining", action="store_true", help="stock podman connection")
    args = ap.parse_args()
    reason = support.podman_available()
    if reason:
        print(f"skipped: {reason}")
        return 0
    mode = ("linear" if args.linear else "mitogen_free") + (", no pipelining" if args.no_pipelining else ", pipelining")
    load = os.getloadavg()[0]
    print(f"slurm_cluster converge ({mode}); {os.cpu_count()} CPUs, load average {load:.1f} at start")
    print(f"{'compute':>7} {'hosts':>5} {'create':>8} {'1st':>8} {'2nd':>8} {'changed 1st/2nd':>16}"
          f" {'podman execs 1st/2nd':>21}")
    rows = []
    try:
        for size in args.sizes:
            r = run(size, args.linear, not args.no_pipelining)
            rows.append(r)
            print(f"{r['compute']:>7} {r['hosts']:>5} {r['create']:>7.1f}s {r['first']:>7.1f}s "
                  f"{r['second']:>7.1f}s {r['changed_first']:>8}/{r['changed_second']:<7}"
                  f" {r['execs_first']:>13}/{r['execs_second']}", flush=True)
    finally:
        support.clean()
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"growth {a['compute']}->{b['compute']} compute: first x{b['first'] / a['first']:.2f}, "
              f"second x{b['second'] / a['second']:.2f} (hosts x{b['hosts'] / a['hosts']:.2f})")
    lab = next((r for r in rows if r["compute"] == 4), None)
    if lab:
        ok = lab["first"] <= 120 and lab["second"] <= 30 and lab["changed_second"] == 0
        print(f"targets (first <= 120 s, second <= 30 s, 0 changed): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

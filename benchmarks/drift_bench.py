"""Drift check time on the lab cluster, and how it grows with the number of nodes.

    .venv/bin/python benchmarks/drift_bench.py                 # 4, 8 and 16 compute nodes
    .venv/bin/python benchmarks/drift_bench.py --sizes 4 --checks 3

For each size it brings up a lab-like stack with the real engine (the lab spec with the
GPU nodes re-counted and the SUs re-cut into pairs: tests/support/molecule.py
``scaled_spec``; 4 compute nodes is the lab itself) in a backend under
.railyard/bench/drift/, times one ``--full`` drift check (every role on every host in
check mode) and then ``--checks`` default ones (every layer, as ``railyard drift`` runs
them: the files layer probes each host and runs in check mode only the pairs that moved
since a clean check, and the roles that manage API objects), says which layer took how
long, and destroys it. Then it fits check time = a + b * nodes over the default checks.
Target (issue 21): the lab (10 nodes) in <= 30 s, < 1 s more per compute node.

The stacks use the lab's container names, so no lab may be up (`railyard destroy
--stack lab --yes`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from railyard.apply.engine import LAB_PASSPHRASE, load_stack_plan
from railyard.deploy import automation
from railyard.drift.collect import collect, spec_secrets, stack_secrets
from railyard.drift.compare import compare
from railyard.drivers.podman import cleanup, labelled
from tests.support.molecule import scaled_spec

BENCH = ROOT / ".railyard" / "bench" / "drift"
STACK = "lab"
LAB_SPEC = ROOT / "inventories" / "lab" / "cluster.yaml"


def spec_file(size: int, work: Path) -> Path:
    if size == 4:
        return LAB_SPEC
    spec = scaled_spec(size, per_su=2, cidr=_lab_cidr())
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _lab_cidr() -> str:
    spec = yaml.safe_load(LAB_SPEC.read_text())
    return spec["network"]["management"]["cidr"]


def prepare(size: int) -> Path:
    work = BENCH / str(size)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copy(ROOT / "Pulumi.yaml", work / "Pulumi.yaml")
    settings = yaml.safe_load((ROOT / f"Pulumi.{STACK}.yaml").read_text())
    settings["config"]["railyard:spec"] = str(spec_file(size, work))
    (work / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return work


def check(plan, work: Path, full: bool = False) -> tuple[float, dict[str, float], str]:
    layer_times: dict[str, float] = {}

    def log(line: str) -> None:  # "files: collected in 41.2s"
        name, _, rest = line.partition(": collected in ")
        if rest.endswith("s"):
            layer_times[name] = float(rest[:-1])

    t0 = time.monotonic()
    secrets = {**stack_secrets(STACK, work), **spec_secrets(plan)}
    report = compare(plan, collect(plan, secrets=secrets, log=log, full=full), stack=STACK)
    return time.monotonic() - t0, layer_times, report.status


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16], help="compute nodes per run")
    ap.add_argument("--checks", type=int, default=2, help="drift checks per size")
    args = ap.parse_args()
    if labelled("container", STACK):
        print("a lab cluster is up; `railyard destroy --stack lab --yes` first", file=sys.stderr)
        return 1
    os.environ.setdefault("PULUMI_CONFIG_PASSPHRASE", LAB_PASSPHRASE)
    points: list[tuple[int, float]] = []
    print(f"{'compute':>7} {'nodes':>5} {'up s':>6} {'check':>5} {'s':>6}  layers (s)             status")
    for size in args.sizes:
        work = prepare(size)
        os.environ["PULUMI_BACKEND_URL"] = f"file://{work / 'state'}"
        (work / "state").mkdir()
        plan = load_stack_plan(STACK, work)
        try:
            t0 = time.monotonic()
            automation.up(STACK, work_dir=work, on_output=lambda _line: None)
            up_s = time.monotonic() - t0
            for i in range(args.checks + 1):
                secs, layers, status = check(plan, work, full=i == 0)
                nodes = len(plan.nodes)
                if i:
                    points.append((nodes, secs))
                shown = " ".join(f"{k}={v:.0f}" for k, v in sorted(layers.items()))
                kind = "full" if i == 0 else "fast"
                print(f"{size:>7} {nodes:>5} {up_s:>6.0f} {kind:>5} {secs:>6.1f}  {shown:<22} {status}", flush=True)
        finally:
            automation.destroy(STACK, work_dir=work, on_output=lambda _line: None)
            cleanup(STACK)
    if len({x for x, _ in points}) > 1:
        a, b = fit(points)
        print(f"fit: check s = {a:.1f} + {b:.2f} * nodes  (least squares over {len(points)} checks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

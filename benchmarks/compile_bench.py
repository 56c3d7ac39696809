"""Compile + render time and peak memory for large rail-optimized specs.

    python benchmarks/compile_bench.py                  # 512 ... 16,384 nodes
    python benchmarks/compile_bench.py --sizes 16384    # the largest sites only

Each size runs in a fresh process (peak RSS is per process) and reports the best of
--repeat runs, phase by phase, as `railyard render` runs them: parse (the YAML reader),
validate (pydantic), compile (cross-field rules, fabric, plan), render (artifact texts)
and write (into an empty temporary directory). The spec: 8 rails of 800G, three tiers
(leaf, spine, core), SUs of 32 nodes, 4 SUs per spine group. Targets: 4,096 nodes in
<= 1.0 s and <= 300 MB (issue 2); 16,384 nodes (131,072 GPUs) in <= 2 s and <= 400 MB
(issue 21); growth no worse than linear.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's railyard, not whichever one is installed


def spec_text(nodes: int, slurm_share: float = 0.75) -> str:
    sus = nodes // 32
    width = max(4, len(str(nodes)))  # gpu0001 ... gpu16384 would not fold: one padding
    slurm_nodes = int(nodes * slurm_share) // 32 * 32
    spec = {
        "cluster": {"name": "bench", "domain": "bench.example.com", "versions": {"slurm": "24.11"}},
        "network": {"management": {"cidr": "10.0.0.0/16", "first_host": 16}},
        "nodes": [
            {"group": "head", "names": "ctl[1-2],login[1-4],kcp[1-3],nfs1",
             "hardware": {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2, "memory_mb": 515000}},
            {"group": "gpu", "pattern": f"gpu{{index:0{width}}}", "count": nodes,
             "hardware": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "memory_mb": 2000000,
                          "nics": 8, "gpus": {"type": "h100", "count": 8}}},
        ],
        "fabric": {
            "link_speed": "800G",
            "rail_optimized": {
                "rails": 8, "nodes": f"gpu[{1:0{width}}-{nodes:0{width}}]", "nodes_per_su": 32, "leaf_radix": 64,
                "spines": {"count": 32, "radix": 64, "links_per_leaf": 1},   # 32 leaves per group x 1
                "core": {"count": min(max(sus // 4 * 32 // 64, 1) * 2, 32),  # <= the spines' 32 free ports
                         "radix": max(sus // 4 * 32, 64), "sus_per_group": 4},
            },
        },
        "partitions": {
            "slurm": {"controllers": "ctl[1-2]", "login": "login[1-4]", "partitions": [
                {"name": "gpu", "nodes": f"gpu[{1:0{width}}-{slurm_nodes:0{width}}]", "default": True}],
                "pyxis": {"package": {"apt": "nvslurm-plugin-pyxis"}}, "enroot": {"package": {"apt": "enroot"}}},
            "kubernetes": {"control_plane": "kcp[1-3]", "workers": f"gpu[{slurm_nodes + 1:0{width}}-{nodes:0{width}}]"},
        },
        "storage": {"nfs": {"server": "nfs1", "exports": [{"path": "/export/home"}],
                            "mounts": [{"export": "/export/home", "mount_point": "/home"}]}},
    }
    return yaml.safe_dump(spec, sort_keys=False)


PHASES = ("parse", "validate", "compile", "render", "write")


def one(nodes: int, repeat: int) -> dict:
    from railyard.compiler import compile as compile_plan
    from railyard.compiler.validate import notes
    from railyard.render import render, write
    from railyard.spec import Cluster
    from railyard.specload import parse

    text = spec_text(nodes)
    best: dict = {}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            cpu = time.process_time()
            t = [time.perf_counter()]
            data = parse(text, "bench").data
            t.append(time.perf_counter())
            cluster = Cluster.model_validate(data)
            t.append(time.perf_counter())
            plan = compile_plan(cluster, "bench")
            notes(plan)
            t.append(time.perf_counter())
            artifacts = render(plan)
            t.append(time.perf_counter())
            write(artifacts, Path(tmp) / "out")
            t.append(time.perf_counter())
        total = t[-1] - t[0]
        if not best or total < best["total_s"]:
            best = {"nodes": nodes, "total_s": total, "cpu_s": time.process_time() - cpu, **{f"{p}_s": t[i + 1] - t[i] for i, p in enumerate(PHASES)},
                    "switches": len(plan.fabric.switches), "links": sum(1 for _ in plan.fabric.cables()),
                    "artifacts": len(artifacts), "bytes": sum(len(v) for v in artifacts.values())}
    best["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="512,1024,4096,16384")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.repeat)))
        return
    from rich.console import Console
    from rich.table import Table

    rows = []
    for n in map(int, args.sizes.split(",")):
        res = subprocess.run([sys.executable, __file__, "--one", str(n), "--repeat", str(args.repeat)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout))
    table = Table(title=f"railyard compile + render (best of {args.repeat}, fresh process per size, wall seconds)")
    for col in ("nodes", "switches", "files", *PHASES, "total s", "CPU s", "s per 1k nodes", "peak RSS MB"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["nodes"]), str(r["switches"]), str(r["artifacts"]),
                      *(f"{r[f'{p}_s']:.3f}" for p in PHASES), f"{r['total_s']:.3f}", f"{r['cpu_s']:.3f}",
                      f"{r['total_s'] / r['nodes'] * 1000:.3f}", f"{r['peak_rss_mb']:.0f}")
    Console(width=160).print(table)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}: on a busy machine wall time exceeds CPU time")
    for size, secs, mb in ((4096, 1.0, 300), (16384, 2.0, 400)):
        r = next((r for r in rows if r["nodes"] == size), None)
        if r:
            print(f"target: {size} nodes <= {secs} s and <= {mb} MB: total {r['total_s']:.3f} s, "
                  f"{r['peak_rss_mb']:.0f} MB")
    ratio = (rows[-1]["total_s"] / rows[-1]["nodes"]) / (rows[0]["total_s"] / rows[0]["nodes"])
    print(f"per-node cost at the largest size / smallest = {ratio:.2f} (<= 1 means no worse than linear)")


if __name__ == "__main__":
    main()

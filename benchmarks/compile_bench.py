"""Compile + render time and peak memory for large rail-optimized specs.

    python benchmarks/compile_bench.py            # 512, 1024, 2048, 4096 nodes

Each size runs in a fresh process (peak RSS is per process) and reports the best of
--repeat runs: 8 rails of 800G, three tiers (leaf, spine, core), SUs of 32 nodes,
4 SUs per spine group. Targets (issue 2): 4,096 nodes in <= 1.0 s and <= 300 MB, growth
no worse than linear.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import yaml


def spec_text(nodes: int, slurm_share: float = 0.75) -> str:
    sus = nodes // 32
    slurm_nodes = int(nodes * slurm_share) // 32 * 32
    spec = {
        "cluster": {"name": "bench", "domain": "bench.example.com", "versions": {"slurm": "24.11"}},
        "network": {"management": {"cidr": "10.0.0.0/16", "first_host": 16}},
        "nodes": [
            {"group": "head", "names": "ctl[1-2],login[1-4],kcp[1-3],nfs1",
             "hardware": {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2, "memory_mb": 515000}},
            {"group": "gpu", "pattern": "gpu{index:04}", "count": nodes,
             "hardware": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "memory_mb": 2000000,
                          "nics": 8, "gpus": {"type": "h100", "count": 8}}},
        ],
        "fabric": {
            "link_speed": "800G",
            "rail_optimized": {
                "rails": 8, "nodes": f"gpu[0001-{nodes:04}]", "nodes_per_su": 32, "leaf_radix": 64,
                "spines": {"count": 32, "radix": 64, "links_per_leaf": 1},   # 32 leaves per group x 1
                "core": {"count": max(sus // 4 * 32 // 64, 1) * 2, "radix": max(sus // 4 * 32, 64), "sus_per_group": 4},
            },
        },
        "partitions": {
            "slurm": {"controllers": "ctl[1-2]", "login": "login[1-4]", "partitions": [
                {"name": "gpu", "nodes": f"gpu[0001-{slurm_nodes:04}]", "default": True}],
                "pyxis": {"package": {"apt": "nvslurm-plugin-pyxis"}}, "enroot": {"package": {"apt": "enroot"}}},
            "kubernetes": {"control_plane": "kcp[1-3]", "workers": f"gpu[{slurm_nodes + 1:04}-{nodes:04}]"},
        },
        "storage": {"nfs": {"server": "nfs1", "exports": [{"path": "/export/home"}],
                            "mounts": [{"export": "/export/home", "mount_point": "/home"}]}},
    }
    return yaml.safe_dump(spec, sort_keys=False)


def one(nodes: int, repeat: int) -> dict:
    from railyard.load import loads_plan
    from railyard.render import render

    text = spec_text(nodes)
    best = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = loads_plan(text, "bench")
        t1 = time.perf_counter()
        artifacts = render(plan)
        t2 = time.perf_counter()
        if not best or t2 - t0 < best["total_s"]:
            best = {"nodes": nodes, "load_compile_s": t1 - t0, "render_s": t2 - t1, "total_s": t2 - t0,
                    "switches": len(plan.fabric.switches), "links": len(plan.fabric.links),
                    "artifacts": len(artifacts), "bytes": sum(len(v) for v in artifacts.values())}
    best["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="512,1024,2048,4096")
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
    table = Table(title=f"railyard compile + render (best of {args.repeat}, fresh process per size)")
    for col in ("nodes", "switches", "links", "load+compile s", "render s", "total s", "s per 1k nodes", "peak RSS MB"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["nodes"]), str(r["switches"]), str(r["links"]), f"{r['load_compile_s']:.3f}",
                      f"{r['render_s']:.3f}", f"{r['total_s']:.3f}", f"{r['total_s'] / r['nodes'] * 1000:.3f}",
                      f"{r['peak_rss_mb']:.0f}")
    Console().print(table)
    big = rows[-1]
    ratio = (rows[-1]["total_s"] / rows[-1]["nodes"]) / (rows[0]["total_s"] / rows[0]["nodes"])
    print(f"target: 4096 nodes <= 1.0 s and <= 300 MB: total {big['total_s']:.3f} s, "
          f"{big['peak_rss_mb']:.0f} MB; per-node cost at the largest size / smallest = {ratio:.2f} "
          "(<= 1 means no worse than linear)")


if __name__ == "__main__":
    main()

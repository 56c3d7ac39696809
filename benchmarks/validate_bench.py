"""`railyard validate` on large spec files: wall time and peak memory, as a user runs it.

    python benchmarks/validate_bench.py                 # 5 MB specs (issue 20: < 3 s)
    python benchmarks/validate_bench.py --mb 1 5 8      # other sizes (8 MiB is the limit)

Each spec is written to a temporary file and validated by the installed `railyard`
command in a fresh process (peak RSS is per process, start-up included); the best of
--repeat runs is printed with the phases of an in-process run (read+parse, pydantic,
compile). Two shapes of the same size:

* inventory: one node group per 8 nodes with a pinned address for every node and the
  hardware written out in each group (what an inventory export looks like), Slurm
  partitions over them, no fabric;
* fabric: the same plus a rail-optimized fabric (8 rails, SUs of 32) over every node,
  the shape compile_bench.py times at smaller sizes;
* 4096-nodes-documented: 4,096 nodes in that shape (fabric included), the rest of the
  5 MB in comments: a large real cluster whose operators document every rack in the spec.

The dense shapes hold about 70,000 nodes, each with a pinned address: there reading (libyaml's
events, the line of every key) takes about a second of CPU, pydantic (70,000 hostnames and
addresses) half a second and compiling (addresses, roles, and with the fabric its 1.1
million cables, kept as one bundle per SU and per pod) under one; the phases show which. (The CLI reads the spec with Python's
cycle collector paused, as compile always runs; the read and pydantic phases timed here
run with it on.)

A hostile 5 MB file (an alias bomb, deep nesting, one huge hostlist) is also timed: each
must be refused, not parsed to the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _group(i: int, per: int, base: int) -> str:
    first = i * per + 1
    names = [f"n{first + k:06d}" for k in range(per)]
    addresses = "".join(
        f"      {n}: 10.{(base + j) >> 16 & 255}.{(base + j) >> 8 & 255}.{(base + j) & 255}\n"
        for j, n in enumerate(names)
    )
    nics = ", ".join(f"mlx5_{k}" for k in range(8))
    return (
        f"  - group: g{i:05d}\n"
        f"    names: \"n[{first:06d}-{first + per - 1:06d}]\"\n"
        f"    hardware:\n"
        f"      sockets: 2\n      cores_per_socket: 56\n      threads_per_core: 2\n"
        f"      memory_mb: 2000000\n      nics: 8\n      nic_names: [{nics}]\n"
        f"      gpus: {{type: h100, count: 8, devices: \"/dev/nvidia[0-7]\"}}\n"
        f"    provision: {{driver: ssh, ssh_user: root}}\n"
        f"    addresses:\n{addresses}"
    )


def spec_text(megabytes: float, fabric: bool, nodes: int | None = None) -> str:
    """A spec of about ``megabytes``; with ``nodes``, that many nodes and the rest of the
    size in comments (each group's rack, serials and asset tags, as sites document them)."""
    per = 8
    head = (
        "cluster: {name: bench, domain: bench.example.com, versions: {slurm: \"24.11\"}}\n"
        "network: {management: {cidr: 10.0.0.0/8, first_host: 16}}\n"
        "nodes:\n"
        "  - {group: head, names: \"ctl[1-2],login1\", hardware: "
        "{sockets: 2, cores_per_socket: 32, threads_per_core: 2, memory_mb: 515000}}\n"
    )
    one = len(_group(0, per, 65536))
    groups = max(1, int(megabytes * 1_000_000 - 2000) // one) if nodes is None else nodes // per
    if fabric:
        groups -= groups % 4  # whole SUs of 32 nodes
    pad = max(0, int(megabytes * 1_000_000 - 2000) // groups - one) if nodes is not None else 0
    note = "  # rack r12 u31-u34, serial SN0123456789ABCDEF, asset A-0000001, PDU a/b 12/13, ok\n"
    body = "".join(note * (pad // len(note)) + _group(i, per, 65536 + i * per) for i in range(groups))
    all_nodes = f"n[000001-{groups * per:06d}]"
    tail = (
        "partitions:\n  slurm:\n    controllers: \"ctl[1-2]\"\n    login: login1\n    partitions:\n"
        f"      - {{name: all, nodes: \"{all_nodes}\", default: true, max_time: \"2-00:00:00\"}}\n"
        "    pyxis: {enabled: false}\n    enroot: {enabled: false}\n"
    )
    if fabric:
        tail += (
            "fabric:\n  link_speed: 800G\n  rail_optimized:\n    rails: 8\n"
            f"    nodes: \"{all_nodes}\"\n    nodes_per_su: 32\n    leaf_radix: 64\n"
            f"    spines: {{count: 32, radix: {max(64, groups // 4 * 8 + 8)}}}\n"
        )
    return head + body + tail


def hostile(kind: str) -> str:
    if kind == "alias-bomb":
        lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
        lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(9)]
        return "\n".join(lines) + "\n" + "# padding\n" * 450_000
    if kind == "deep-nesting":
        return "a: " + "[" * 2_500_000 + "]" * 2_500_000 + "\n"
    if kind == "huge-hostlist":
        return "nodes: [{group: g, names: \"n[1-999999999]," + ",".join(f"m{i}" for i in range(600_000)) + "\"}]\n"
    raise ValueError(kind)


def run_cli(path: Path) -> tuple[float, int, int, float]:
    """Wall seconds, peak RSS in MB, exit code and CPU seconds of `railyard validate path`."""
    exe = shutil.which("railyard", path=str(Path(sys.executable).parent)) or "railyard"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "wall = time.perf_counter() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, ru.ru_maxrss // 1024, p.returncode, ru.ru_utime + ru.ru_stime)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, exe, "validate", str(path)],
                         capture_output=True, text=True, env=env, check=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2]), float(out[3])


def phases(text: str) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from railyard.compiler import compile as compile_plan
    from railyard.errors import SpecError
    from railyard.spec import Cluster
    from railyard.specload import parse

    clock = time.process_time  # CPU seconds: the machine is shared, wall time is noisy
    t0 = clock()
    parsed = parse(text, "bench")
    t1 = clock()
    cluster = Cluster.model_validate(parsed.data)
    t2 = clock()
    try:
        compile_plan(cluster)
        ok = True
    except SpecError:
        ok = False
    t3 = clock()
    return {"nodes": sum(1 for g in cluster.nodes for _ in g.hostnames()), "cpu_parse_s": round(t1 - t0, 2),
            "cpu_pydantic_s": round(t2 - t1, 2), "cpu_compile_s": round(t3 - t2, 2), "valid": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, nargs="+", default=[5.0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for mb in args.mb:
            cases += [(f"{mb:g}MB-4096-nodes-documented", spec_text(mb, True, nodes=4096)),
                      (f"{mb:g}MB-dense-inventory", spec_text(mb, False)),
                      (f"{mb:g}MB-dense-fabric", spec_text(mb, True))]
        cases += [(f"hostile-{k}", hostile(k)) for k in ("alias-bomb", "deep-nesting", "huge-hostlist")]
        for name, text in cases:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(text)
            runs = [run_cli(path) for _ in range(args.repeat)]
            wall, _rss, rc, _cpu = min(runs)
            row = {"spec": name, "bytes": len(text.encode()), "exit": rc, "wall_s": round(wall, 2),
                   "cpu_s": round(min(r[3] for r in runs), 2), "peak_rss_mb": max(r[1] for r in runs)}
            if not name.startswith("hostile"):
                row.update(phases(text))
            rows.append(row)
            if not args.json:
                print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

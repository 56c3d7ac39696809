"""The long fuzz run of tests/test_spec_fuzz.py (issue 20): N examples per strategy,
not derandomized, with hypothesis's statistics (valid/invalid share, typical runtimes).

    python benchmarks/fuzz_bench.py              # 2,000 examples per strategy
    python benchmarks/fuzz_bench.py -n 20000

CI runs the same test bounded (about 200 derandomized examples); this is the search.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--examples", type=int, default=2000, help="examples per strategy")
    args = ap.parse_args()
    env = {**os.environ, "RAILYARD_FUZZ_EXAMPLES": str(args.examples), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_spec_fuzz.py", "-q", "-p", "no:cacheprovider",
         "--hypothesis-show-statistics", "-k", "fuzz", "--timeout", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - start
    keep = [ln for ln in res.stdout.splitlines()
            if any(w in ln for w in ("test_spec_fuzz.py::", "passing", "runtimes", "valid", "Stopped", "passed",
                                     "failed", "Error"))]
    print("\n".join(keep))
    print(f"examples per strategy: {args.examples}, strategies: 3, wall time: {wall:.0f} s, exit {res.returncode}")
    if res.returncode:
        print(res.stdout[-5000:])
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())

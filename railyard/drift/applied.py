"""The container runtime each Kubernetes worker ran when ``railyard up`` last finished.

containerd comes from Debian's package, and railyard pins no version of it: the role
installs whatever the node's apt sources have and never upgrades it. So "containerd moved"
cannot mean "differs from the plan"; it means "differs from what ran when railyard last
applied". ``railyard up`` records each Node's ``.status.nodeInfo.containerRuntimeVersion``
here when it finishes (railyard.lifecycle), and drift compares against that record.

The files layer's baselines (railyard.drift.baseline) are not the place: they are taken
by drift checks, not by an apply, and hold only a hash of the whole package set. A
containerd upgrade changes that hash, the pair runs in check mode, the role (which does not
pin containerd) finds nothing to change, and the next baseline takes the new version in:
the move would be absorbed at the first check after it instead of reported.

The record lives beside the baselines on the machine that runs railyard (mode 0600). A
check from another machine, or of a cluster last applied before railyard kept this, has no
record, and says so in a note instead of comparing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

VERSION = 1


def record_path(root: Path, cluster: str) -> Path:
    return root / ".railyard" / "drift" / f"{cluster}.applied.json"


def load(path: Path) -> dict[str, str] | None:
    """node -> runtime version; None when there is no readable record of this version."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    runtimes = doc.get("runtimes") if isinstance(doc, dict) and doc.get("version") == VERSION else None
    if not isinstance(runtimes, dict):
        return None
    return {str(k): str(v) for k, v in runtimes.items() if isinstance(v, str)}


def save(path: Path, runtimes: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": VERSION, "runtimes": dict(sorted(runtimes.items()))}, f, indent=1)
    os.replace(tmp, path)

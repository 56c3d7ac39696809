"""Rendered artifacts on disk, where the playbooks of a run (and of the drift check) read them."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from railyard.compiler import Plan
from railyard.render import digest, write


def write_artifacts(root: Path, plan: Plan, artifacts: dict[str, str]) -> Path:
    """Rendered artifacts in a directory named by their digest: written once, never changed.

    Playbooks read them there, so a preview of another spec can never change what a
    running or later playbook of this one reads.
    """
    base = root / ".railyard" / "artifacts"
    out = base / f"{plan.name}-{digest(artifacts)[:16]}"
    if not out.exists():
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=base))
        tmp.rmdir()
        write(artifacts, tmp)
        try:
            os.rename(tmp, out)
        except OSError:  # another run wrote the same digest first: same content
            shutil.rmtree(tmp, ignore_errors=True)
    return out

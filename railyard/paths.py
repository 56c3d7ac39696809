"""Where railyard finds what it does not ship inside the Python package.

The package carries the templates of the rendered artifacts (``railyard/templates``,
package data): ``railyard validate`` and ``railyard render`` work from any install. What
``up`` and ``drift`` hand to Ansible and Pulumi (the roles, ``ansible.cfg``, the strategy
and inventory plugins, ``Pulumi.yaml``, the scripts) lives in the project: a checkout of
this repository, or the directory ``RAILYARD_ROOT`` names.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

ROOT_ENV = "RAILYARD_ROOT"
_CHECKOUT = Path(__file__).resolve().parents[1]


def project_root() -> Path:
    """``$RAILYARD_ROOT`` when set, else the checkout this package was loaded from when it
    is one (it has ``roles/``), else the current directory."""
    named = os.environ.get(ROOT_ENV)
    if named:
        return Path(named).expanduser().resolve()
    if (_CHECKOUT / "roles").is_dir():
        return _CHECKOUT
    return Path.cwd()


ROOT = project_root()


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on *path* (created if missing) for the block: one
    process at a time on this host, whichever railyard process or test it is."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

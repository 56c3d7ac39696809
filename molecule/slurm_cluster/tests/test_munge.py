"""munge on ctl1: the key from the secret, 0400 munge, munged decodes its own credential.

Every Slurm node's key and ids are test_cluster.py's; this is the role's own contract on one
node (molecule/slurm_cluster converges common and munge before the Slurm roles, as `railyard
up` does: a scenario of its own made, converged and destroyed the same node again)."""

from __future__ import annotations

import base64
import hashlib

import testinfra

from tests.support import molecule as support
from tests.support.verify import assert_running, journal

NODE = "ctl1"
HOST = testinfra.get_host(f"podman://{NODE}")


def test_key_file():
    key = HOST.file("/etc/munge/munge.key")
    assert key.mode == 0o400 and key.user == "munge" and key.group == "munge"
    want = hashlib.sha256(base64.b64decode(support.MUNGE_KEY.read_text())).hexdigest()
    assert key.sha256sum == want, "the key on the node is not the secret that was passed"


def test_munged_running():
    assert_running(HOST, "munge")


def test_credential_roundtrip():
    res = HOST.run("munge -n | unmunge")
    assert res.rc == 0, res.stderr + journal(HOST, "munge")

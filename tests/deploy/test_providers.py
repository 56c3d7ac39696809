"""The providers' pure parts: what diff decides, what outputs keep. No engine, no hosts."""

from __future__ import annotations

from railyard.deploy.providers.key import KeyProvider
from railyard.deploy.providers.node import NodeProvider
from railyard.deploy.providers.playbook import PlaybookProvider
from railyard.drivers import Attachment, PodmanNode, to_props

PODMAN = to_props(PodmanNode(
    name="gpu001", cluster="lab", address="10.77.0.12", container="railyard-lab-gpu001", image="img",
    attachments=(Attachment("railyard-lab-mgmt", "eth0", "10.77.0.12", ("gpu001",)),),
))
STATE = {"exists": True, "power": "on", "reachable": True, "detail": "running", "instance": "abc", "facts": {}}


def test_node_no_change_after_refresh() -> None:
    d = NodeProvider().diff("gpu001", {**PODMAN, **STATE, "log_urn": "urn:a"}, {**PODMAN, "log_urn": "urn:b"})
    assert not d.changes and not d.replaces


def test_node_new_address_replaces_it_delete_first() -> None:
    moved = {**PODMAN, "address": "10.77.0.99"}
    d = NodeProvider().diff("gpu001", {**PODMAN, **STATE}, moved)
    assert d.changes and d.replaces == ["address"] and d.delete_before_replace


def test_stopped_node_is_updated_not_replaced() -> None:
    d = NodeProvider().diff("gpu001", {**PODMAN, **STATE, "power": "off"}, dict(PODMAN))
    assert d.changes and not d.replaces


def test_metal_is_never_replaced() -> None:
    ssh = {"driver": "ssh", "name": "n", "cluster": "c", "address": "10.0.0.1", "user": "root", "port": 22}
    d = NodeProvider().diff("n", {**ssh, **STATE}, {**ssh, "address": "10.0.0.2"})
    assert d.changes and not d.replaces


def test_node_check_rejects_nonsense() -> None:
    assert NodeProvider().check({}, {"driver": "floppy", "name": "n", "cluster": "c", "address": "a"}).failures


PLAYBOOK = {
    "name": "munge", "roles": ["munge"], "group": "slurm", "hosts": ["ctl1"], "instances": {"ctl1": "i1"},
    "digest": "d1", "vars": {}, "inventory": "/a/inventory.json", "artifacts_dir": "/a", "root": "/repo",
    "log_urn": "urn",
}


def test_playbook_keeps_a_hash_of_secrets_only() -> None:
    p = PlaybookProvider()
    news = {**PLAYBOOK, "secret_vars": {"munge_key": "c2VjcmV0"}}
    outs = p.outputs(news, {"recap": {}})
    assert "secret_vars" not in outs and "c2VjcmV0" not in repr(outs)
    assert not p.diff("munge", outs, news).changes
    rotated = {**news, "secret_vars": {"munge_key": "bmV3"}}
    assert p.diff("munge", outs, rotated).changes


def test_playbook_ignores_where_artifacts_live() -> None:
    p = PlaybookProvider()
    outs = p.outputs({**PLAYBOOK, "secret_vars": {}}, {"recap": {}})
    moved = {**PLAYBOOK, "secret_vars": {}, "artifacts_dir": "/b", "inventory": "/b/inventory.json"}
    assert not p.diff("munge", outs, moved).changes
    assert p.diff("munge", outs, {**moved, "digest": "d2"}).changes


def test_playbook_reruns_where_the_drift_check_found_drift(monkeypatch) -> None:
    """remediate hosts force an update that runs on those hosts only, and are not kept."""
    from railyard.deploy.providers import playbook

    p = PlaybookProvider()
    two = {**PLAYBOOK, "hosts": ["ctl1", "gpu001"], "instances": {"ctl1": "i1", "gpu001": "i2"}, "secret_vars": {}}
    outs = p.outputs(two, {"recap": {}})
    assert not p.diff("munge", outs, {**two, "remediate": []}).changes
    drifted = {**two, "remediate": ["gpu001"]}
    assert p.diff("munge", outs, drifted).changes
    runs: list[list[str] | None] = []
    monkeypatch.setattr(playbook, "run", lambda _props, _log, limit=None: runs.append(limit) or {})
    after = p.update("munge", outs, drifted).outs
    assert runs == [["gpu001"]]
    assert "remediate" not in after  # the next run without drift changes nothing
    assert not p.diff("munge", after, {**two, "remediate": []}).changes
    # a recreated host and a drifted one: both, once
    p.update("munge", outs, {**drifted, "instances": {"ctl1": "i9", "gpu001": "i2"}})
    assert runs[-1] == ["ctl1", "gpu001"]


def test_key_is_made_once() -> None:
    k = KeyProvider()
    created = k.create({"purpose": "munge", "length": 1024.0, "value": None})  # numbers arrive as floats
    assert len(created.outs["value"]) == 1368  # base64 of 1024 bytes
    assert k.update("munge", created.outs, {"purpose": "munge", "length": 1024, "value": None}).outs["value"] \
        == created.outs["value"]
    assert k.diff("munge", created.outs, {"purpose": "munge", "length": 2048}).replaces == ["length"]
    assert k.check({}, {"purpose": "munge", "length": 8}).failures


def test_playbook_vars_get_their_whole_numbers_back() -> None:
    """Pulumi hands every number over as a float; a role must write 3306, not 3306.0."""
    from railyard.deploy.providers.playbook import whole_numbers

    got = whole_numbers({"port": 3306.0, "ratio": 0.5, "list": [1.0, "1.0"], "nested": {"n": 2.0}, "flag": True})
    assert got == {"port": 3306, "ratio": 0.5, "list": [1, "1.0"], "nested": {"n": 2}, "flag": True}
    assert type(got["port"]) is int and type(got["nested"]["n"]) is int

"""The podman driver with real containers from the lab image. Everything is labelled and removed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from railyard.drivers import Attachment, PodmanNode, Volume
from railyard.drivers.podman import (
    NetworkSpec,
    PodmanDriver,
    cleanup,
    ensure_network,
    labelled,
    observe_network,
    remove_network,
    run_args,
)
from railyard.lab.image import IMAGE_REF

pytestmark = pytest.mark.podman
CLUSTER = "drvtest"


def _podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def networks() -> Iterator[tuple[NetworkSpec, NetworkSpec]]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/setup-podman.sh)")
    if subprocess.run(["podman", "image", "exists", IMAGE_REF], check=False).returncode != 0:
        pytest.skip(f"{IMAGE_REF} not built (python -m railyard.lab.image)")
    cleanup(CLUSTER)
    mgmt = NetworkSpec(f"railyard-{CLUSTER}-mgmt", CLUSTER, subnet="10.201.77.0/24", gateway="10.201.77.1")
    rail = NetworkSpec(f"railyard-{CLUSTER}-rail0", CLUSTER, internal=True, dns=False)
    ensure_network(mgmt)
    ensure_network(rail)
    yield mgmt, rail
    cleanup(CLUSTER)
    assert labelled("container", CLUSTER) == labelled("network", CLUSTER) == labelled("volume", CLUSTER) == []


def _node(mgmt: NetworkSpec, rail: NetworkSpec, name: str = "n1", ip: str = "10.201.77.10") -> PodmanNode:
    return PodmanNode(
        name=name,
        cluster=CLUSTER,
        address=ip,
        container=f"railyard-{CLUSTER}-{name}",
        image=IMAGE_REF,
        attachments=(
            Attachment(mgmt.name, "eth0", ip, (name,)),
            Attachment(rail.name, "rail0"),
        ),
        devices=("/dev/nvidia0",),
        volumes=(Volume(f"railyard-{CLUSTER}-{name}-data", "/data"),),
    )


@pytest.fixture
def no_containers(monkeypatch):
    """The driver with nothing on the host: no container exists, each boots at once."""
    from railyard.drivers import podman as drv

    monkeypatch.setattr(drv, "_inspect", lambda kind, name: None)
    monkeypatch.setattr(drv.PodmanDriver, "_wait_for_systemd", staticmethod(lambda node, log: None))
    monkeypatch.setattr(drv.PodmanDriver, "observe", lambda self, node: None)
    return drv


def test_nodes_with_volumes_are_created_one_at_a_time(monkeypatch, tmp_path, no_containers) -> None:
    """podman 4.3 deadlocks when two containers sharing a volume are set up at once
    (podman#20313): ``podman run`` of a node with volumes holds the host-wide lock, one
    without volumes does not wait for it. (Unit level; the parallel test below runs podman.)"""
    import fcntl

    from railyard.drivers import podman as drv

    monkeypatch.setattr(drv, "volume_lock_path", lambda: tmp_path / "lock")
    held: dict[str, bool] = {}

    def fake_podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if args[0] == "run":
            with open(tmp_path / "lock", "a") as other:
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(other, fcntl.LOCK_UN)
                    held[args[args.index("--name") + 1]] = False
                except BlockingIOError:
                    held[args[args.index("--name") + 1]] = True
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(drv, "_podman", fake_podman)
    base = PodmanNode(name="a", cluster="c", address="10.0.0.5", container="c-a", image="img", attachments=())
    from dataclasses import replace

    drv.PodmanDriver().ensure_up(replace(base, volumes=(Volume("v", "/v"),)))
    drv.PodmanDriver().ensure_up(replace(base, container="c-b"))
    assert held == {"c-a": True, "c-b": False}


def test_a_half_created_container_is_removed_and_the_run_repeated(monkeypatch, no_containers) -> None:
    """A podman run killed half-way (its timeout, a deadlock) leaves a container in storage
    that ``podman ps`` does not list but whose name is taken: the next run removes it
    (``rm --storage``) and runs again. Unit level: such leftovers cannot be made on purpose."""
    from railyard.drivers import podman as drv

    calls: list[tuple[str, ...]] = []
    leftover = {"c-a"}

    def fake_podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if args[0] == "run" and leftover:
            return subprocess.CompletedProcess(args, 125, "", 'the container name "c-a" is already in use')
        if args[:3] == ("ps", "-a", "--external"):
            return subprocess.CompletedProcess(args, 0, "".join(f"{n}\tStorage\n" for n in leftover), "")
        if args[:2] == ("rm", "--storage"):
            leftover.discard(args[2])
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(drv, "_podman", fake_podman)
    node = PodmanNode(name="a", cluster="c", address="10.0.0.5", container="c-a", image="img", attachments=())
    drv.PodmanDriver().ensure_up(node)
    assert [c[0] for c in calls if c[0] in ("run", "rm")] == ["run", "rm", "run"]
    assert ("rm", "--storage", "c-a") in calls


def test_run_args_are_what_podman_gets() -> None:
    n = PodmanNode(name="a", cluster="c", address="10.0.0.5", container="railyard-c-a", image="img",
                   attachments=(Attachment("m", "eth0", "10.0.0.5", ("a",)),))
    args = run_args(n)
    assert args[-2:] == ["img", "/sbin/init"]
    assert "--systemd=always" in args and "--no-hosts" in args
    assert args[args.index("--network") + 1] == "m:interface_name=eth0,ip=10.0.0.5,alias=a"
    assert "railyard.cluster=c" in args


def test_network_is_adopted_and_refuses_strangers(networks: tuple[NetworkSpec, NetworkSpec]) -> None:
    mgmt, _ = networks
    info = ensure_network(mgmt)  # second time: adopted, not recreated
    assert info["subnets"][0]["subnet"] == "10.201.77.0/24"
    stranger = NetworkSpec(mgmt.name, "someone-else")
    with pytest.raises(Exception, match="not part of cluster someone-else"):
        ensure_network(stranger)


def test_node_lifecycle(networks: tuple[NetworkSpec, NetworkSpec]) -> None:
    mgmt, rail = networks
    node = _node(mgmt, rail)
    d = PodmanDriver()
    assert not d.observe(node).exists

    first = d.ensure_up(node)
    assert first.exists and first.power == "on" and first.reachable and first.instance
    assert _podman("exec", node.container, "hostname") == "n1"
    addrs = _podman("exec", node.container, "ip", "-br", "addr")
    assert "10.201.77.10/24" in addrs and "rail0" in addrs
    assert _podman("exec", node.container, "stat", "-c", "%F", "/dev/nvidia0") == "character special file"
    assert _podman("exec", node.container, "systemctl", "is-system-running") in ("running", "degraded")
    assert d.ensure_up(node).instance == first.instance  # idempotent: adopted

    # Someone removes the container by hand: observe says so, ensure_up makes a new one.
    _podman("rm", "--force", node.container)
    gone = d.observe(node)
    assert not gone.exists and not gone.reachable
    again = d.ensure_up(node)
    assert again.reachable and again.instance != first.instance

    # Stopped is not gone: power off, and ensure_up starts it.
    _podman("stop", "--time", "1", node.container)
    stopped = d.observe(node)
    assert stopped.exists and stopped.power == "off"
    assert d.ensure_up(node).instance == again.instance

    d.ensure_absent(node)
    assert not d.observe(node).exists
    assert f"railyard-{CLUSTER}-n1-data" not in labelled("volume", CLUSTER)


@pytest.mark.parametrize("owner_first", [True, False], ids=["owner-first", "client-first"])
def test_a_shared_volume_goes_with_the_last_node_using_it(networks, owner_first) -> None:
    """The lab's NFS clients mount their server's export volume. Whichever order the nodes
    go in (destroy removes them in parallel), the volume outlives neither the last node
    using it nor is it taken from a node still running."""
    from dataclasses import replace

    mgmt, rail = networks
    server = _node(mgmt, rail, "s1", "10.201.77.21")
    shared = server.volumes[0]
    client = replace(_node(mgmt, rail, "c1", "10.201.77.22"), volumes=(Volume(shared.name, "/mnt", owner="s1"),))
    d = PodmanDriver()
    d.ensure_up(server)
    d.ensure_up(client)
    _podman("exec", server.container, "sh", "-c", "echo hi > /data/f")
    assert _podman("exec", client.container, "cat", "/mnt/f") == "hi"
    first, last = (server, client) if owner_first else (client, server)
    d.ensure_absent(first)
    assert shared.name in labelled("volume", CLUSTER), "removed while a node still uses it"
    assert _podman("exec", last.container, "ls", "/data" if last is server else "/mnt") == "f"
    d.ensure_absent(last)
    assert shared.name not in labelled("volume", CLUSTER)


def test_nodes_sharing_a_volume_come_up_in_parallel(networks) -> None:
    """What ``railyard up`` does: an NFS server and two clients of its export volume are
    created from parallel steps (podman 4.3 could hang here, podman#20313)."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    mgmt, rail = networks
    server = _node(mgmt, rail, "p1", "10.201.77.31")
    vol = Volume(server.volumes[0].name, "/mnt", owner="p1")
    clients = [replace(_node(mgmt, rail, f"p{i}", f"10.201.77.3{i}"), volumes=(vol,)) for i in (2, 3)]
    d = PodmanDriver()
    with ThreadPoolExecutor(3) as pool:
        states = list(pool.map(d.ensure_up, [server, *clients]))
    assert all(s.reachable for s in states)
    _podman("exec", server.container, "sh", "-c", "echo hi > /data/f")
    assert [_podman("exec", c.container, "cat", "/mnt/f") for c in clients] == ["hi", "hi"]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(d.ensure_absent, [server, *clients]))
    assert vol.name not in labelled("volume", CLUSTER)


def test_changed_settings_recreate_the_container(networks: tuple[NetworkSpec, NetworkSpec]) -> None:
    mgmt, rail = networks
    d = PodmanDriver()
    old = d.ensure_up(_node(mgmt, rail, "n2", "10.201.77.11"))
    moved = _node(mgmt, rail, "n2", "10.201.77.12")
    new = d.ensure_up(moved)
    assert new.instance != old.instance
    assert "10.201.77.12/24" in _podman("exec", moved.container, "ip", "-br", "addr")
    d.ensure_absent(moved)


def test_remove_network(networks: tuple[NetworkSpec, NetworkSpec]) -> None:
    extra = NetworkSpec(f"railyard-{CLUSTER}-extra", CLUSTER, internal=True)
    ensure_network(extra)
    remove_network(extra.name)
    remove_network(extra.name)  # already gone: fine
    assert observe_network(extra.name) is None

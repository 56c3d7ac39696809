"""The Redfish driver against the real sushy-tools emulator (fake driver, basic auth)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import requests

from railyard.drivers import Bmc, RedfishNode
from railyard.drivers.redfish import RedfishAuthError, RedfishClient, RedfishDriver, RedfishError

USER, PASSWORD = "admin", "s3cret-for-tests"
SYSTEM_UUID = "5a1e3f4b-0b4e-4c9a-9a51-9e5b2b0c0001"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bmc_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("sushy")
    htpasswd = d / "htpasswd"
    # Few bcrypt rounds: the emulator checks the hash on every request.
    htpasswd.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    port = _free_port()
    config = d / "emulator.conf"
    config.write_text(
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(d / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        "SUSHY_EMULATOR_FAKE_SYSTEMS = [{"
        f"'uuid': '{SYSTEM_UUID}', 'name': 'gpu001', 'power_state': 'Off', "
        "'nics': [{'mac': '00:5c:52:31:3a:01', 'ip': '10.0.0.11'}]}]\n"
    )
    exe = Path(sys.executable).parent / "sushy-emulator"
    log = (d / "emulator.log").open("w")
    proc = subprocess.Popen([str(exe), "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{url}/redfish/v1", timeout=1)
                break
            except requests.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"sushy-emulator did not start: {(d / 'emulator.log').read_text()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def node(bmc_url: str) -> RedfishNode:
    return RedfishNode(name="gpu001", cluster="test", address="10.0.0.11",
                       bmc=Bmc(address=bmc_url, username=USER, password=PASSWORD))


def test_inventory_names_the_system(bmc_url: str) -> None:
    c = RedfishClient(bmc_url, USER, PASSWORD)
    system = c.system_path()
    assert system == f"/redfish/v1/Systems/{SYSTEM_UUID}"
    inv = c.inventory(system)
    assert inv["uuid"] == SYSTEM_UUID
    assert inv["name"] == "gpu001"
    assert inv["manufacturer"] == "Sushy Emulator"
    # The fake driver has no CPU or memory data: absent, not invented.
    assert inv["cpus"] is None and inv["memory_gib"] is None


def test_wrong_password_is_a_clear_error(bmc_url: str) -> None:
    c = RedfishClient(bmc_url, USER, "wrong")
    with pytest.raises(RedfishAuthError) as exc:
        c.system_path()
    msg = str(exc.value)
    assert "rejected the credentials of user 'admin'" in msg and "HTTP 401" in msg
    assert "wrong" not in msg  # never the password


def test_unknown_system_is_an_error(bmc_url: str) -> None:
    c = RedfishClient(bmc_url, USER, PASSWORD)
    with pytest.raises(RedfishError, match="HTTP 404"):
        c.power_state("/redfish/v1/Systems/no-such-system")


def test_boot_once_pxe(bmc_url: str) -> None:
    c = RedfishClient(bmc_url, USER, PASSWORD)
    system = c.system_path()
    c.set_boot_once(system, "Pxe")
    target, _enabled = c.boot_override(system)
    assert target == "Pxe"  # the emulator reports "Continuous" whatever was asked


def test_power_cycle_through_the_driver(node: RedfishNode) -> None:
    """On and off, each applied by the emulator after a random 1-11 s: the driver polls."""
    driver = RedfishDriver(power_timeout=30)
    messages: list[str] = []
    assert driver.observe(node).power == "off"

    t0 = time.monotonic()
    state = driver.ensure_up(node, messages.append)
    assert state.power == "on" and state.reachable and state.instance == SYSTEM_UUID
    assert time.monotonic() - t0 >= 0.9, "the emulator delays power changes; the driver must have waited"
    assert driver.client(node).boot_override(driver.client(node).system_path())[0] == "Pxe"
    assert any("powered on after" in m for m in messages)

    again = time.monotonic()
    assert driver.ensure_up(node).power == "on"  # already on: no reset, no wait
    assert time.monotonic() - again < 1

    driver.ensure_absent(node, messages.append)
    assert driver.observe(node).power == "off"


def test_wrong_password_through_the_driver(node: RedfishNode) -> None:
    bad = RedfishNode(name=node.name, cluster=node.cluster, address=node.address,
                      bmc=Bmc(address=node.bmc.address, username=USER, password="nope"))
    with pytest.raises(RedfishAuthError):
        RedfishDriver().observe(bad)


def test_unreachable_bmc_is_reported_not_raised() -> None:
    port = _free_port()  # nothing listens here
    n = RedfishNode(name="x", cluster="t", address="x", bmc=Bmc(address=f"http://127.0.0.1:{port}", username="u"))
    state = RedfishDriver().observe(n)
    assert state.exists and not state.reachable and state.power == "unknown"
    assert "did not answer" in state.detail

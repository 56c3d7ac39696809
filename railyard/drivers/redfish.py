"""Real machines through their BMC: power, one-time boot device, inventory (DMTF Redfish).

A tiny typed client over ``requests`` instead of a full SDK: railyard needs five calls.
BMCs apply power changes later than they answer (seconds, sometimes a minute; the
sushy-tools emulator waits 1-11 s), so every power change is followed by polling.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import requests

from railyard.drivers.base import DriverError, Log, NodeState, RedfishNode, quiet

ResetType = Literal["On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart"]
POWER_TIMEOUT = 120.0
POLL_INTERVAL = 1.0


class RedfishError(DriverError):
    """The BMC refused or failed a request; the message names the BMC and the call."""


class RedfishAuthError(RedfishError):
    """The BMC rejected the credentials."""


class RedfishClient:
    def __init__(
        self,
        base_url: str,
        username: str,
        password: str,
        *,
        verify_tls: bool = True,
        timeout: float = 15.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._session = requests.Session()
        self._session.auth = (username, password)
        self._session.verify = verify_tls
        self._session.headers.update({"Accept": "application/json", "OData-Version": "4.0"})
        self.timeout = timeout

    # ---------------------------------------------------------------- HTTP

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            resp = self._session.request(method, url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            raise RedfishError(f"BMC {self.base_url} did not answer {method} {path}: {exc}") from None
        if resp.status_code in (401, 403):
            raise RedfishAuthError(
                f"BMC {self.base_url} rejected the credentials of user '{self.username}' "
                f"(HTTP {resp.status_code} on {method} {path}); check the BMC password reference in the spec"
            )
        if resp.status_code >= 400:
            raise RedfishError(f"BMC {self.base_url}: {method} {path} failed: HTTP {resp.status_code} {_message(resp)}")
        return resp

    def get(self, path: str) -> dict[str, Any]:
        return self._request("GET", path).json()

    # ---------------------------------------------------------------- systems

    def system_path(self, system_id: str = "") -> str:
        """The system's resource path; with no id, the BMC's only system."""
        if system_id:
            return f"/redfish/v1/Systems/{system_id}"
        members = [m["@odata.id"] for m in self.get("/redfish/v1/Systems").get("Members", [])]
        if len(members) != 1:
            raise RedfishError(
                f"BMC {self.base_url} manages {len(members)} systems ({', '.join(members) or 'none'}); "
                "set bmc.system_id in the spec"
            )
        return members[0]

    def power_state(self, system: str) -> str:
        return str(self.get(system).get("PowerState", "Unknown"))

    def reset(self, system: str, reset_type: ResetType) -> None:
        self._request("POST", f"{system}/Actions/ComputerSystem.Reset", {"ResetType": reset_type})

    def set_boot_once(self, system: str, target: str) -> None:
        """Boot from ``target`` (Pxe, Hdd, Cd, ...) at the next power-on only."""
        self._request("PATCH", system, {
            "Boot": {"BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": "Once"}
        })

    def boot_override(self, system: str) -> tuple[str, str]:
        boot = self.get(system).get("Boot", {})
        return str(boot.get("BootSourceOverrideTarget", "None")), str(boot.get("BootSourceOverrideEnabled", ""))

    def inventory(self, system: str) -> dict[str, Any]:
        s = self.get(system)
        return {
            "uuid": s.get("UUID", ""),
            "name": s.get("Name", ""),
            "manufacturer": s.get("Manufacturer", ""),
            "model": s.get("Model", ""),
            "serial": s.get("SerialNumber", ""),
            "cpus": (s.get("ProcessorSummary") or {}).get("Count"),
            "cpu_model": (s.get("ProcessorSummary") or {}).get("Model", ""),
            "memory_gib": (s.get("MemorySummary") or {}).get("TotalSystemMemoryGiB"),
            "power": s.get("PowerState", "Unknown"),
        }

    def wait_power(
        self, system: str, want: str, timeout: float = POWER_TIMEOUT, interval: float = POLL_INTERVAL
    ) -> float:
        """Poll until PowerState is ``want``; returns the seconds it took."""
        start = time.monotonic()
        state = self.power_state(system)
        while state != want:
            if time.monotonic() - start > timeout:
                raise RedfishError(
                    f"BMC {self.base_url}: {system} still {state} after {timeout:.0f}s, expected {want}"
                )
            time.sleep(interval)
            state = self.power_state(system)
        return time.monotonic() - start

    def power_on(self, system: str, boot: str = "", timeout: float = POWER_TIMEOUT) -> float:
        if self.power_state(system) == "On":
            return 0.0
        if boot and boot != "None":
            self.set_boot_once(system, boot)
        self.reset(system, "On")
        return self.wait_power(system, "On", timeout)

    def power_off(self, system: str, graceful: bool = True, timeout: float = POWER_TIMEOUT) -> float:
        if self.power_state(system) == "Off":
            return 0.0
        if graceful:
            self.reset(system, "GracefulShutdown")
            try:
                return self.wait_power(system, "Off", timeout)
            except RedfishError:
                pass  # the OS ignored the request: force it
        self.reset(system, "ForceOff")
        return self.wait_power(system, "Off", timeout)


def _message(resp: requests.Response) -> str:
    try:
        err = resp.json().get("error", {})
        info = err.get("@Message.ExtendedInfo") or [{}]
        return str(info[0].get("Message") or err.get("message") or "")
    except ValueError:
        return resp.text[:200]


class RedfishDriver:
    """A node is a server behind a BMC. Up = powered on (PXE once); absent = powered off."""

    def __init__(self, power_timeout: float = POWER_TIMEOUT) -> None:
        self.power_timeout = power_timeout

    @staticmethod
    def client(node: RedfishNode) -> RedfishClient:
        b = node.bmc
        return RedfishClient(b.address, b.username, b.password, verify_tls=b.verify_tls)

    def observe(self, node: RedfishNode) -> NodeState:
        c = self.client(node)
        try:
            system = c.system_path(node.bmc.system_id)
            inv = c.inventory(system)  # one GET: inventory and power state
        except RedfishAuthError:
            raise
        except RedfishError as exc:
            if "HTTP 404" in str(exc):
                return NodeState(exists=False, power="unknown", detail=str(exc))
            return NodeState(exists=True, power="unknown", reachable=False, detail=str(exc))
        power = inv.pop("power")
        return NodeState(
            exists=True,
            power="on" if power == "On" else "off" if power == "Off" else "unknown",
            reachable=True,
            detail=f"PowerState {power}",
            instance=str(inv["uuid"]),
            facts=inv,
        )

    def ensure_up(self, node: RedfishNode, log: Log = quiet) -> NodeState:
        c = self.client(node)
        system = c.system_path(node.bmc.system_id)
        if c.power_state(system) != "On":
            log(f"{node.name}: one-time boot {node.boot}, power on via {node.bmc.address}")
            took = c.power_on(system, node.boot, self.power_timeout)
            log(f"{node.name}: powered on after {took:.1f}s")
        return self.observe(node)

    def ensure_absent(self, node: RedfishNode, log: Log = quiet) -> None:
        c = self.client(node)
        system = c.system_path(node.bmc.system_id)
        log(f"{node.name}: powering off via {node.bmc.address}")
        took = c.power_off(system, graceful=True, timeout=self.power_timeout)
        log(f"{node.name}: off after {took:.1f}s")

"""Filters for k8s_control_plane: pure functions, tested in tests/test_k8s_filters.py."""

from __future__ import annotations

import ipaddress
from typing import Any


def k8s_first_service_ip(cidr: str) -> str:
    """The ClusterIP the apiserver gives the ``kubernetes`` Service: the range's first host."""
    net = ipaddress.ip_network(cidr, strict=True)
    return str(next(net.hosts()))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "k8s_first_service_ip": k8s_first_service_ip,
        }

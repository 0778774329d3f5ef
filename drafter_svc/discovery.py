"""Where the verifiers are: a fixed list, a DNS name resolved again and again, or a Kubernetes
Service whose EndpointSlices are watched (drafter_svc.k8s_discovery).

Contract of a Discovery: `updates()` yields the complete set of ready verifier addresses
("HOST:PORT", IPv6 hosts in brackets) whenever it changes, starting with the first known set
(possibly empty). It runs until cancelled; lookup errors are logged and the last set is kept,
so a flaky DNS server or API server does not take verifiers away from running drafters.

`--verifier` forms (`discovery_from_target`):
  HOST:PORT                 one verifier (gRPC resolves HOST itself)
  HOST:PORT,HOST:PORT,...   a fixed list
  dns:///NAME:PORT          every address NAME resolves to, resolved every `refresh_seconds`
                            (a Kubernetes headless Service's name gives every ready pod)
  k8s://NAMESPACE/SERVICE[:PORT]  the Service's EndpointSlices, watched (PORT: a number or a
                            port name; default: the port named "grpc", else the only one)
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Protocol

from drafter_svc.host_port import format_address, split_host_port
from drafter_svc.k8s_discovery import KubernetesDiscovery

log = logging.getLogger(__name__)


class Discovery(Protocol):
    def updates(self) -> AsyncIterator[frozenset[str]]:
        """The ready verifier addresses, each time they change."""
        ...


class StaticDiscovery:
    """A fixed set of addresses (gRPC's own resolver handles each name)."""

    def __init__(self, addresses: list[str]) -> None:
        for address in addresses:
            split_host_port(address, "verifier")
        self.addresses = frozenset(addresses)

    def __repr__(self) -> str:
        return ",".join(sorted(self.addresses))

    async def updates(self) -> AsyncIterator[frozenset[str]]:
        yield self.addresses
        await asyncio.Event().wait()  # never changes


class DnsDiscovery:
    """Every address a DNS name resolves to, resolved again every refresh_seconds."""

    def __init__(self, host: str, port: int, refresh_seconds: float) -> None:
        self.host = host
        self.port = port
        self.refresh_seconds = refresh_seconds

    def __repr__(self) -> str:
        return f"dns:///{format_address(self.host, self.port)}"

    async def resolve(self) -> frozenset[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        return frozenset(format_address(str(info[4][0]), self.port) for info in infos)

    async def updates(self) -> AsyncIterator[frozenset[str]]:
        last: frozenset[str] | None = None
        while True:
            try:
                current = await self.resolve()
            except OSError as error:
                log.warning("resolving %s failed (%s); keeping %s", self, error, sorted(last or ()))
                current = last if last is not None else frozenset()
            if current != last:
                yield current
                last = current
            await asyncio.sleep(self.refresh_seconds)


def discovery_from_target(target: str, refresh_seconds: float = 5.0) -> Discovery:
    """The Discovery for a `--verifier` value (forms in the module docstring)."""
    target = target.strip()
    if target.startswith("k8s://"):
        return KubernetesDiscovery.from_target(target)
    if target.startswith("dns:"):
        name = target.removeprefix("dns:").lstrip("/")
        host, port = split_host_port(name, "verifier")
        return DnsDiscovery(host, port, refresh_seconds)
    return StaticDiscovery([part.strip() for part in target.split(",") if part.strip()])

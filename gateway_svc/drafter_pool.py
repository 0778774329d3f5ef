"""The gateway's drafters: one gRPC channel each, polled for health and model, requests spread.

Contract:
- The pool follows a Discovery (drafter_svc.discovery: a fixed list, a DNS name, a Kubernetes
  Service's EndpointSlices): every address it lists gets one channel, shared by all requests
  sent there. Every `poll_seconds` each drafter is asked for its `grpc.health.v1` status
  (service specdec.v1.Drafter) and its `GetModelInfo`; it is ready while both answer and the
  health status is SERVING (a draining drafter turns NOT_SERVING and gets no new requests).
- `acquire()` picks the ready drafter with the fewest requests in flight from this gateway
  (ties at random) until `release()`. No ready drafter: NoDrafterReady.
- `report_unavailable(address)`: a call to it failed with UNAVAILABLE; it takes no requests
  until its next poll answers.
- A drafter that leaves the discovered set takes no new requests; its channel closes once its
  last running request ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from drafter_svc.discovery import Discovery
from specdec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)
DRAFTER_SERVICE = "specdec.v1.Drafter"
# gRPC's reconnect backoff grows to 120 s by default; a restarted drafter should be seen in seconds.
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


class NoDrafterReady(Exception):
    """No drafter can take a request now; the message says what is known of each."""


@dataclass(frozen=True)
class Placement:
    address: str
    stub: drafter_pb2_grpc.DrafterStub
    info: drafter_pb2.DrafterModelInfo


class Drafter:
    """One drafter of the pool and what the gateway knows about it."""

    def __init__(self, address: str, channel: grpc.aio.Channel) -> None:
        self.address = address
        self.channel = channel
        self.stub = drafter_pb2_grpc.DrafterStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)
        self.listed = True
        self.serving = False
        self.info: drafter_pb2.DrafterModelInfo | None = None
        self.problem = "not asked yet"
        self.in_flight = 0
        self.poller: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.listed and self.serving and self.info is not None

    def describe(self) -> str:
        return f"{self.address} ({'ready' if self.ready else self.problem})"


class DrafterPool:
    def __init__(
        self,
        discovery: Discovery,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, str | int]] = (),
        metadata: tuple[tuple[str, str], ...] | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        self.discovery = discovery
        self.credentials = credentials
        self.options = [*RECONNECT_OPTIONS, *options]
        self.metadata = metadata  # sent with every call (the bearer token)
        self.poll_seconds = poll_seconds
        self.drafters: dict[str, Drafter] = {}
        self._follower: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Follow the discovery in the background (call from the serving event loop)."""
        if self._follower is None:
            self._follower = asyncio.ensure_future(self._follow())

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
        for drafter in list(self.drafters.values()):
            await self._drop(drafter)

    def ready(self) -> list[Drafter]:
        return [d for d in self.drafters.values() if d.ready]

    def model_names(self) -> list[str]:
        """The models the ready drafters serve, sorted."""
        return sorted({d.info.model_name for d in self.ready() if d.info is not None})

    def describe(self) -> str:
        known = ", ".join(d.describe() for d in sorted(self.drafters.values(), key=lambda d: d.address) if d.listed)
        return f"drafters from {self.discovery!r}: {known or 'none found'}"

    def acquire(self) -> Placement:
        """Place one request; `release` it when its call ends."""
        ready = self.ready()
        if not ready:
            raise NoDrafterReady(f"no drafter is ready ({self.describe()})")
        drafter = min(ready, key=lambda d: (d.in_flight, random.random()))
        assert drafter.info is not None  # ready drafters have one
        drafter.in_flight += 1
        return Placement(drafter.address, drafter.stub, drafter.info)

    def release(self, placement: Placement) -> None:
        drafter = self.drafters.get(placement.address)
        if drafter is None:
            return
        drafter.in_flight -= 1
        if not drafter.listed and drafter.in_flight == 0:
            asyncio.ensure_future(self._drop(drafter))

    def report_unavailable(self, address: str) -> None:
        drafter = self.drafters.get(address)
        if drafter is not None and drafter.serving:
            log.info("drafter %s: a call found it unavailable; no new requests until it answers again", address)
            drafter.serving = False
            drafter.problem = "unavailable"

    async def _follow(self) -> None:
        async for addresses in self.discovery.updates():
            for address in sorted(addresses):
                drafter = self.drafters.get(address)
                if drafter is None:
                    drafter = self.drafters[address] = Drafter(address, self._channel(address))
                    log.info("drafter %s joined", address)
                drafter.listed = True
                if drafter.poller is None:
                    drafter.poller = asyncio.ensure_future(self._poll(drafter))
            for drafter in list(self.drafters.values()):
                if drafter.listed and drafter.address not in addresses:
                    log.info("drafter %s left (%d requests stay on it)", drafter.address, drafter.in_flight)
                    drafter.listed = False
                    if drafter.poller is not None:
                        drafter.poller.cancel()
                        drafter.poller = None
                    if drafter.in_flight == 0:
                        await self._drop(drafter)

    def _channel(self, address: str) -> grpc.aio.Channel:
        if self.credentials is not None:
            return grpc.aio.secure_channel(address, self.credentials, options=self.options)
        return grpc.aio.insecure_channel(address, options=self.options)

    async def _drop(self, drafter: Drafter) -> None:
        if self.drafters.get(drafter.address) is drafter:
            del self.drafters[drafter.address]
        if drafter.poller is not None:
            drafter.poller.cancel()
        await drafter.channel.close()

    async def _poll(self, drafter: Drafter) -> None:
        timeout = max(5.0, 2 * self.poll_seconds)
        while True:
            was_ready = drafter.ready
            try:
                check = await drafter.health.Check(health_pb2.HealthCheckRequest(service=DRAFTER_SERVICE), timeout=timeout)
                drafter.serving = check.status == health_pb2.HealthCheckResponse.SERVING
                drafter.problem = "ready" if drafter.serving else health_pb2.HealthCheckResponse.ServingStatus.Name(check.status)
                if drafter.serving:
                    drafter.info = await drafter.stub.GetModelInfo(
                        drafter_pb2.GetDrafterModelInfoRequest(), timeout=timeout, metadata=self.metadata
                    )
            except grpc.aio.AioRpcError as error:
                drafter.serving = False
                drafter.problem = f"{error.code().name}: {error.details()}"
            if drafter.ready != was_ready:
                log.info("drafter %s %s", drafter.address, "ready" if drafter.ready else f"not ready: {drafter.problem}")
            await asyncio.sleep(self.poll_seconds)

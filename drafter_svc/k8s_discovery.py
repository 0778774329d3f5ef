"""`--verifier k8s://NAMESPACE/SERVICE[:PORT]`: the ready endpoints of a Kubernetes Service,
followed live by listing and then watching its discovery.k8s.io/v1 EndpointSlices.

The official `kubernetes` client runs on a daemon thread (it is synchronous) and hands each new
address set to the event loop. Inside a pod it uses the service account (the drafter's Role must
allow get/list/watch on endpointslices); elsewhere KUBECONFIG or ~/.kube/config.

An endpoint counts while its `ready` condition is true or unset (unset means unknown, which the
API says to read as ready); terminating pods turn unready and are dropped at once. A watch that
expires (410 Gone) or fails is followed by a fresh list, after a short pause on errors; the last
known set stays meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from drafter_svc.host_port import format_address

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _default_api_client() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def _slice_port(endpoint_slice: Any, wanted: str) -> int | None:
    """The port number to dial on this slice's endpoints (wanted: a number, a name or "")."""
    if wanted.isdigit():
        return int(wanted)
    ports = [p for p in (endpoint_slice.ports or []) if p.port is not None]
    if wanted:
        named = [p.port for p in ports if p.name == wanted]
        return named[0] if named else None
    grpc_named = [p.port for p in ports if p.name == "grpc"]
    if grpc_named:
        return grpc_named[0]
    return ports[0].port if len(ports) == 1 else None


def ready_addresses(slices: dict[str, Any], wanted_port: str) -> frozenset[str]:
    """HOST:PORT of every ready endpoint (its first address) across the Service's slices."""
    addresses = set()
    for endpoint_slice in slices.values():
        port = _slice_port(endpoint_slice, wanted_port)
        if port is None:
            continue
        for endpoint in endpoint_slice.endpoints or []:
            conditions = endpoint.conditions
            if conditions is not None and conditions.ready is False:
                continue
            if endpoint.addresses:
                addresses.add(format_address(endpoint.addresses[0], port))
    return frozenset(addresses)


class KubernetesDiscovery:
    def __init__(
        self,
        namespace: str,
        service: str,
        port: str = "",
        api_client: Any = None,
        watch_timeout_seconds: int = 240,
        retry_seconds: float = 1.0,
    ) -> None:
        self.namespace = namespace
        self.service = service
        self.port = port
        self.api_client = api_client
        self.watch_timeout_seconds = watch_timeout_seconds
        self.retry_seconds = retry_seconds

    @classmethod
    def from_target(cls, target: str, **kwargs: Any) -> KubernetesDiscovery:
        """Parse k8s://NAMESPACE/SERVICE[:PORT]."""
        rest = target.removeprefix("k8s://")
        namespace, _, service = rest.partition("/")
        service, _, port = service.partition(":")
        if not namespace or not service or "/" in service:
            raise ValueError(f"verifier: expected k8s://NAMESPACE/SERVICE[:PORT], got {target!r}")
        return cls(namespace, service, port, **kwargs)

    def __repr__(self) -> str:
        return f"k8s://{self.namespace}/{self.service}" + (f":{self.port}" if self.port else "")

    async def updates(self) -> AsyncIterator[frozenset[str]]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[frozenset[str]] = asyncio.Queue()
        stop = threading.Event()

        def publish(addresses: frozenset[str]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, addresses)

        thread = threading.Thread(target=self._follow, args=(publish, stop), name=f"watch {self}", daemon=True)
        thread.start()
        last: frozenset[str] | None = None
        try:
            while True:
                current = await queue.get()
                if current != last:
                    yield current
                    last = current
        finally:
            stop.set()

    def _follow(self, publish: Any, stop: threading.Event) -> None:
        """List, then watch from the list's resourceVersion; again after expiry or errors."""
        from kubernetes import client, watch

        try:
            api = client.DiscoveryV1Api(self.api_client or _default_api_client())
        except Exception as error:  # noqa: BLE001 - no config at all: say so, publish nothing
            log.error("%s: no Kubernetes API access: %s", self, error)
            return
        selector = f"{SERVICE_NAME_LABEL}={self.service}"
        while not stop.is_set():
            try:
                listing = api.list_namespaced_endpoint_slice(self.namespace, label_selector=selector)
                slices = {s.metadata.name: s for s in listing.items}
                publish(ready_addresses(slices, self.port))
                version = listing.metadata.resource_version
                while not stop.is_set():
                    watcher = watch.Watch()
                    for event in watcher.stream(
                        api.list_namespaced_endpoint_slice,
                        self.namespace,
                        label_selector=selector,
                        resource_version=version,
                        timeout_seconds=self.watch_timeout_seconds,
                        allow_watch_bookmarks=True,
                        _request_timeout=self.watch_timeout_seconds + 30,
                    ):
                        if stop.is_set():
                            watcher.stop()
                            break
                        kind, obj = event["type"], event["object"]
                        if kind in ("ADDED", "MODIFIED"):
                            slices[obj.metadata.name] = obj
                        elif kind == "DELETED":
                            slices.pop(obj.metadata.name, None)
                        if kind != "BOOKMARK":
                            publish(ready_addresses(slices, self.port))
                    version = watcher.resource_version or version
            except client.exceptions.ApiException as error:
                if error.status == 410:  # the watch expired: list again
                    log.info("%s: watch expired, listing again", self)
                    continue
                log.warning("%s: API error %s %s; retrying", self, error.status, error.reason)
                stop.wait(self.retry_seconds)
            except Exception as error:  # noqa: BLE001 - connection trouble: retry, keep the last set
                log.warning("%s: %s: %s; retrying", self, type(error).__name__, error)
                stop.wait(self.retry_seconds)

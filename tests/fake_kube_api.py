"""A loopback HTTP server that plays the Kubernetes API for discovery.k8s.io/v1 EndpointSlices:
list (with a labelSelector) and watch (chunked JSON events from a resourceVersion on, ended by
timeoutSeconds), as the real API server does. The test edits slices; every open watch sees the
change at once. `expire_watches()` sends the ERROR 410 (Gone) event of an expired watch.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

PREFIX = "/apis/discovery.k8s.io/v1/namespaces/"


def endpoint_slice(
    name: str, service: str, endpoints: list[tuple[str, bool | None]], port: int, port_name: str = "grpc"
) -> dict[str, Any]:
    """An EndpointSlice of `service`: endpoints are (ip, ready); ready None leaves it unset."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], **({"conditions": {"ready": ready}} if ready is not None else {})} for ip, ready in endpoints
        ],
    }


class FakeKubeApi:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.slices: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, dict[str, Any]]] = []  # (resourceVersion, watch event)
        self.version = 100
        self.requests: list[str] = []  # "list ..." / "watch ..." with the query, for assertions
        self.changed = threading.Condition()
        self.closed = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                fake._handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # --- what the test does ----------------------------------------------------------------

    def put(self, obj: dict[str, Any]) -> None:
        with self.changed:
            kind = "MODIFIED" if obj["metadata"]["name"] in self.slices else "ADDED"
            self._record(kind, obj)
            self.slices[obj["metadata"]["name"]] = obj

    def delete(self, name: str) -> None:
        with self.changed:
            self._record("DELETED", self.slices.pop(name))

    def expire_watches(self) -> None:
        with self.changed:
            self.version += 1
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                      "message": "too old resource version", "code": 410}
            self.events.append((self.version, {"type": "ERROR", "object": status, "expire": True}))
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def client(self) -> Any:
        """A kubernetes.client.ApiClient pointed at this server."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        return client.ApiClient(config)

    # --- the API server's side -----------------------------------------------------------------

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.events.append((self.version, {"type": kind, "object": obj}))
        self.changed.notify_all()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlparse(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path != f"{PREFIX}{self.namespace}/endpointslices":
            self._send(handler, 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": url.path})
            return
        selector = query.get("labelSelector", "")
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)

        def matches(obj: dict[str, Any]) -> bool:
            labels = obj["metadata"].get("labels", {})
            return all(labels.get(k) == v for k, v in wanted.items())

        if query.get("watch") not in ("true", "1", "True"):
            self.requests.append(f"list {url.query}")
            with self.changed:
                items = [o for o in self.slices.values() if matches(o)]
                body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
                        "metadata": {"resourceVersion": str(self.version)}, "items": items}
            self._send(handler, 200, body)
            return
        self.requests.append(f"watch {url.query}")
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 30)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            with self.changed:
                deadline = time.monotonic() + timeout
                while not self.closed:
                    for version, event in [(v, e) for v, e in self.events if v > since]:
                        since = version
                        if event.get("expire") or matches(event["object"]):
                            line = json.dumps({"type": event["type"], "object": event["object"]}).encode() + b"\n"
                            handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                            handler.wfile.flush()
                        if event.get("expire"):
                            raise EOFError
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.changed.wait(timeout=left):
                        break
            handler.wfile.write(b"0\r\n\r\n")
        except (EOFError, BrokenPipeError, ConnectionResetError):
            try:
                handler.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
        handler.close_connection = True

    def _send(self, handler: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

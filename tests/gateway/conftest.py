"""The gateway in front of real services: a verifier and a drafter on loopback (the integration
tests' configuration, with the verifier's /metrics on), and `specdec serve openai` as its own
process with a bearer token, reached by the official `openai` package."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from specdec.launcher import LocalCluster, Service
from tests.conftest import services

TOKEN = "gateway-test-token"


@dataclass
class Gateway:
    service: Service
    base_url: str
    token: str
    cluster: LocalCluster

    def client(self, api_key: str | None = None) -> OpenAI:
        return OpenAI(base_url=f"{self.base_url}/v1", api_key=api_key or self.token, max_retries=0, timeout=600)

    def http(self, method: str, path: str, body: bytes | None = None, token: str | None = None,
             timeout: float = 600) -> tuple[int, dict[str, str], bytes]:
        """One raw request: (status, headers, body), errors included."""
        request = urllib.request.Request(f"{self.base_url}{path}", data=body, method=method)
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def post(self, path: str, payload: object, token: str | None = TOKEN) -> tuple[int, dict[str, str], dict]:
        status, headers, body = self.http("POST", path, json.dumps(payload).encode(), token)
        return status, headers, json.loads(body)


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"not within {timeout:.0f} s")


@pytest.fixture(scope="package")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    logs = tmp_path_factory.mktemp("gateway-logs")
    token_file = logs / "token"
    token_file.write_text(TOKEN + "\n")
    # pass-size tuning only makes passes faster; skipped, the cluster is ready sooner
    with services(logs, "--tune-pass-sizes", "false") as cluster:  # its verifier serves /metrics (verifier_metrics)
        service = Service("openai", ["--drafter", cluster.address, "--auth-token-file", str(token_file),
                                     "--drafter-poll-seconds", "0.2"], Path(logs) / "gateway.log")
        try:
            base_url = f"http://127.0.0.1:{service.port}"
            wait_for(lambda: urllib.request.urlopen(f"{base_url}/health", timeout=5).status == 200, 60)
            yield Gateway(service, base_url, TOKEN, cluster)
        finally:
            assert service.stop() == 0, (Path(logs) / "gateway.log").read_text()[-2000:]

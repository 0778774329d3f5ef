"""A gateway whose drafters are not there: up, not ready, and every generation refused with 503."""

from __future__ import annotations

import json
from pathlib import Path

from specdec.launcher import Service, free_port
from tests.gateway.conftest import Gateway, wait_for


def test_without_a_ready_drafter_health_and_requests_get_503(tmp_path: Path) -> None:
    service = Service("openai", ["--drafter", f"127.0.0.1:{free_port()}", "--drafter-poll-seconds", "0.2"], tmp_path / "gateway.log")
    try:
        gateway = Gateway(service, f"http://127.0.0.1:{service.port}", "", None)  # type: ignore[arg-type]
        wait_for(lambda: gateway.http("GET", "/health")[0] == 503, 30)
        status, headers, body = gateway.http("GET", "/health")
        assert "no drafter is ready" in json.loads(body)["error"]["message"]
        assert json.loads(gateway.http("GET", "/v1/models")[2]) == {"object": "list", "data": []}
        for path, payload in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
                              ("/v1/completions", {"prompt": "Hi"})):
            status, headers, error = gateway.post(path, payload, token=None)
            assert status == 503 and headers["retry-after"] == "1" and error["error"]["code"] == "unavailable", error
    finally:
        assert service.stop() == 0, (tmp_path / "gateway.log").read_text()[-2000:]

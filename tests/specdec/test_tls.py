"""Optional TLS (specdec.tls): certificates made in the test with trustme.

- a TLS server refuses a plaintext client; under mutual TLS a client without a certificate is
  refused and one with a certificate from the client CA is served;
- a real drafter process configured only through SPECDEC_DRAFTER_* environment variables serves
  TLS to clients, talks mutual TLS to a (model-free) verifier dialled by IP with the
  certificate's name as server name, runs a whole Generate, and answers plaintext health
  checks on its health port (what Kubernetes' gRPC probes and the image's HEALTHCHECK use), and
  counts the generation in its Prometheus metrics.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from specdec import tls
from specdec.client import Client
from specdec.launcher import Service, free_port
from tests.fake_verifier import FakeVerifier


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate for verifier.test / localhost / 127.0.0.1, a client certificate."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("verifier.test", "localhost", "127.0.0.1")
    client = ca.issue_cert("drafter.test")
    paths = {name: str(folder / f"{name}.pem") for name in ("ca", "server_cert", "server_key", "client_cert", "client_key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["server_cert"])
    server.private_key_pem.write_to_path(paths["server_key"])
    client.cert_chain_pems[0].write_to_path(paths["client_cert"])
    client.private_key_pem.write_to_path(paths["client_key"])
    return paths


def _health_server(credentials: grpc.ServerCredentials) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port


def _check(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_tls_server_refuses_plaintext_and_mtls_refuses_clients_without_a_certificate(pki: dict[str, str]) -> None:
    server, port = _health_server(tls.server_credentials(pki["server_cert"], pki["server_key"]))
    try:
        with grpc.secure_channel(f"localhost:{port}", tls.channel_credentials(pki["ca"])) as channel:
            assert _check(channel) == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as refused:
            _check(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)

    server, port = _health_server(tls.server_credentials(pki["server_cert"], pki["server_key"], pki["ca"]))
    try:
        with grpc.secure_channel(f"localhost:{port}", tls.channel_credentials(pki["ca"])) as channel, pytest.raises(grpc.RpcError) as refused:
            _check(channel)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        mutual = tls.channel_credentials(pki["ca"], pki["client_cert"], pki["client_key"])
        # dialled by IP, checked against the certificate's DNS name (how drafters reach pods)
        with grpc.secure_channel(f"127.0.0.1:{port}", mutual, options=tls.channel_options("verifier.test")) as channel:
            assert _check(channel) == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(0)


def test_half_configured_tls_is_an_error(pki: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="key file"):
        tls.server_credentials(pki["server_cert"], "")
    with pytest.raises(ValueError, match="client CA"):
        tls.server_credentials("", "", pki["ca"])
    with pytest.raises(ValueError, match="CA file"):
        tls.channel_credentials("", pki["client_cert"], pki["client_key"])
    assert tls.server_credentials("", "") is None and tls.channel_credentials("") is None


def test_drafter_process_over_tls_end_to_end(pki: dict[str, str], tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    verifier = FakeVerifier(
        tokenizer.fingerprint, next_token=tokenizer.encode(" yes")[0],
        credentials=tls.server_credentials(pki["server_cert"], pki["server_key"], pki["ca"]),
    )
    health_port, metrics_port = free_port(), free_port()
    env = {
        "SPECDEC_DRAFTER_VERIFIER": f"127.0.0.1:{verifier.port}",
        "SPECDEC_DRAFTER_VERIFIER_TLS_CA_FILE": pki["ca"],
        "SPECDEC_DRAFTER_VERIFIER_TLS_CERT_FILE": pki["client_cert"],
        "SPECDEC_DRAFTER_VERIFIER_TLS_KEY_FILE": pki["client_key"],
        "SPECDEC_DRAFTER_VERIFIER_TLS_SERVER_NAME": "verifier.test",
        "SPECDEC_DRAFTER_TLS_CERT_FILE": pki["server_cert"],
        "SPECDEC_DRAFTER_TLS_KEY_FILE": pki["server_key"],
        "SPECDEC_DRAFTER_HEALTH_PORT": str(health_port),
        "SPECDEC_DRAFTER_METRICS_PORT": str(metrics_port),
    }
    drafter = Service("drafter", [], tmp_path / "drafter.log", env=env)
    try:
        health_cmd = [sys.executable, "-m", "specdec.cli", "health", "--address", f"127.0.0.1:{health_port}", "--service", "specdec.v1.Drafter"]
        deadline = time.monotonic() + 30
        while subprocess.run(health_cmd, capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, (tmp_path / "drafter.log").read_text()[-2000:]
            time.sleep(0.2)
        with Client(f"localhost:{drafter.port}", credentials=tls.channel_credentials(pki["ca"])) as client:
            result = client.generate("Say yes", max_new_tokens=3, num_draft_tokens=0)
        assert result.token_ids == [tokenizer.encode(" yes")[0]] * 3 and result.finish_reason == "length"
        assert verifier.rounds == 3
        with Client(drafter.address) as plaintext, pytest.raises(grpc.RpcError) as refused:
            plaintext.generate("Say yes", max_new_tokens=1)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        liveness = [*health_cmd[:-1], "liveness"]
        assert subprocess.run(liveness, capture_output=True).returncode == 0
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'specdec_drafter_requests_total{finish_reason="length"} 1.0' in metrics
        assert "specdec_spec_decode_num_drafts_total 3.0" in metrics  # three plain target passes
        assert "specdec_drafter_generated_tokens_total 3.0" in metrics
        assert "specdec_drafter_open_sessions 0.0" in metrics and "specdec_drafter_verifiers_ready 1.0" in metrics
    finally:
        assert drafter.stop() == 0
        verifier.stop()

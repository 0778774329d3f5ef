"""Health, reflection and tokenizer checks of the real service processes (graceful shutdown under
load: test_faults.py)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.client import Client
from specdec.launcher import Service
from specdec.v1 import verifier_pb2, verifier_pb2_grpc
from tests.tokenizer_variants import write_altered_tokenizer
from verifier_svc.server import IDLE_WORKER_SECONDS, PASS_WAIT_SECONDS


def test_health_and_reflection(cluster) -> None:  # type: ignore[no-untyped-def]
    for address, service in ((cluster.address, "specdec.v1.Drafter"), (cluster.verifier.address, "specdec.v1.Verifier")):
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == health_pb2.HealthCheckResponse.SERVING
            services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
            assert {service, "grpc.health.v1.Health"} <= services


def test_drafter_refuses_a_verifier_with_another_tokenizer(cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    altered = write_altered_tokenizer(tmp_path)
    drafter = Service("drafter", ["--verifier", cluster.verifier.address, "--model", str(altered)], tmp_path / "drafter.log")
    try:
        with Client(drafter.address) as client:
            deadline = time.monotonic() + 60
            while True:
                with pytest.raises(grpc.RpcError) as caught:
                    client.generate("hi", max_new_tokens=2)
                if caught.value.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "tokenizer" in caught.value.details()
    finally:
        drafter.stop()


# SIGTERM during load (running streams finish, new ones are refused, exit 0 within the grace
# period): tests/integration/test_faults.py, on the cluster the fault tests share.


@pytest.mark.slow
def test_a_verifier_sigtermed_mid_pass_exits_0_without_aborting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With no grace the stream is cancelled at once while its long prefill pass runs on the
    scheduler's thread: the process must not end with that thread inside torch (SIGABRT,
    "terminate called without an active exception"); it waits for the pass or exits without
    it (verifier_svc/server.py)."""
    log = tmp_path / "verifier.log"
    verifier = Service("verifier", ["--grace-seconds", "0", "--tune-pass-sizes", "false", "--context-length", "4096"], log)
    try:
        verifier.wait_serving(600)
        sent = threading.Event()

        def requests() -> Iterator[verifier_pb2.VerifyRequest]:
            prompt = [100 + (37 * i) % 20000 for i in range(2000)]
            yield verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt))
            yield verifier_pb2.VerifyRequest(round=verifier_pb2.Round())  # one plain step: the prefill pass
            sent.set()
            time.sleep(60)

        with grpc.insecure_channel(verifier.address) as channel:
            stream = verifier_pb2_grpc.VerifierStub(channel).Verify(requests())
            threading.Thread(target=_drain, args=(stream,), daemon=True).start()
            assert sent.wait(30)
            time.sleep(0.5)  # the 2,000-token pass has begun
            terminated = time.monotonic()
            verifier.process.send_signal(signal.SIGTERM)
            assert verifier.process.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert time.monotonic() - terminated < PASS_WAIT_SECONDS + 5
        assert "terminate called" not in log.read_text()
    finally:
        verifier.stop()


@pytest.mark.slow
def test_a_verifier_sigtermed_while_loading_exits_0_without_aborting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The model loads on the scheduler's thread; SIGTERM then ends the process at once, exit
    status 0, without waiting for the load or aborting inside it."""
    log = tmp_path / "verifier.log"
    verifier = Service("verifier", [], log)
    try:
        time.sleep(2)  # past start-up, into the load
        terminated = time.monotonic()
        verifier.process.send_signal(signal.SIGTERM)
        assert verifier.process.wait(timeout=30) == 0, log.read_text()[-3000:]
        assert time.monotonic() - terminated < IDLE_WORKER_SECONDS + 5
        assert "terminate called" not in log.read_text()
    finally:
        verifier.stop()


def _drain(stream: Iterator) -> None:  # type: ignore[type-arg]
    try:
        for _ in stream:
            pass
    except grpc.RpcError:
        pass  # cancelled by the shutdown

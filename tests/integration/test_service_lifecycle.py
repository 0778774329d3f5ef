"""Health, reflection, tokenizer checks and graceful shutdown of the real service processes."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.client import Client
from specdec.launcher import LocalCluster, Service
from tests.tokenizer_variants import write_altered_tokenizer


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


@pytest.mark.slow
def test_sigterm_lets_running_streams_finish_and_refuses_new_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with LocalCluster(tmp_path, verifier_args=["--grace-seconds", "30"], drafter_args=["--grace-seconds", "30"]) as c:
        chunks: list = []
        with Client(c.address) as client:
            stream = client.stream("Once upon a time", max_new_tokens=48, temperature=0.0, num_draft_tokens=0)
            chunks.append(next(stream))
            reader = threading.Thread(target=lambda: chunks.extend(stream))
            reader.start()
            c.drafter.process.terminate()
            c.verifier.process.terminate()
            time.sleep(0.5)
            with pytest.raises(grpc.RpcError) as refused:
                Client(c.address).generate("hi", max_new_tokens=2)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            reader.join(timeout=60)
        assert chunks[-1].finish_reason == "length"
        assert sum(len(chunk.token_ids) for chunk in chunks) == 48
        assert c.drafter.process.wait(timeout=30) == 0
        assert c.verifier.process.wait(timeout=30) == 0

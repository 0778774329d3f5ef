"""Health, reflection and tokenizer checks of the real service processes (graceful shutdown under
load: test_faults.py)."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.client import Client
from specdec.launcher import Service
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


# SIGTERM during load (running streams finish, new ones are refused, exit 0 within the grace
# period): tests/integration/test_faults.py, on the cluster the fault tests share.

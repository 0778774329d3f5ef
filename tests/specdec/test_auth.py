"""Bearer tokens, per-client limits and request parsing (specdec.auth, specdec.client_limits,
specdec.grpc_server), on an in-process gRPC server: the Verifier servicer without a model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from specdec.auth import REFUSED, BearerTokenInterceptor, authorization_metadata, load_token
from specdec.client_limits import client_key
from specdec.grpc_server import ExceptionToStatusInterceptor
from specdec.v1 import verifier_pb2, verifier_pb2_grpc
from verifier_svc.servicer import VerifierServicer


def test_token_file_is_stripped_and_must_not_be_empty(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  abc123\n")
    assert load_token(str(tmp_path / "token")) == b"abc123"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="auth_token_file"):
        load_token(str(tmp_path / "empty"))


def test_only_the_exact_bearer_token_is_admitted() -> None:
    check = BearerTokenInterceptor(b"abc123")
    assert check.admits(authorization_metadata("abc123"))
    assert check.admits((("authorization", "bearer abc123"),))  # the scheme is case-insensitive
    for metadata in [None, (), (("authorization", "Bearer "),), (("authorization", "Bearer abc12"),),
                     (("authorization", "Bearer abc1234"),), (("authorization", "Basic abc123"),), (("authorization", "abc123"),),
                     (("x-token", "abc123"),)]:
        assert not check.admits(metadata), metadata


def test_client_key_drops_the_port() -> None:
    assert client_key("ipv4:10.0.0.7:53122") == "ipv4:10.0.0.7"
    assert client_key("ipv6:[::1]:4000") == "ipv6:[::1]"
    assert client_key("unix:/tmp/sock") == "unix:/tmp/sock"


def test_protected_methods_need_the_token_health_does_not_and_garbage_is_invalid_argument() -> None:
    async def scenario() -> None:
        server = grpc.aio.server(interceptors=[BearerTokenInterceptor(b"tok"), ExceptionToStatusInterceptor()])
        verifier_pb2_grpc.add_VerifierServicer_to_server(VerifierServicer(2, 4, 4, 0), server)
        checker = health.aio.HealthServicer()
        await checker.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = verifier_pb2_grpc.VerifierStub(channel)
                for metadata in (None, authorization_metadata("wrong")):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), metadata=metadata)
                    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED and refused.value.details() == REFUSED
                with pytest.raises(grpc.aio.AioRpcError) as loading:
                    await stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), metadata=authorization_metadata("tok"))
                assert loading.value.code() == grpc.StatusCode.UNAVAILABLE  # past the token: no model loaded
                status = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                assert status.status == health_pb2.HealthCheckResponse.SERVING
                raw = channel.unary_unary("/specdec.v1.Verifier/GetModelInfo")
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await raw(b"\xff\xff", metadata=authorization_metadata("tok"))
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details().startswith("request:")
        finally:
            await server.stop(0)

    asyncio.run(scenario())

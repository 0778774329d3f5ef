"""Who gets in and how much they may ask: a real drafter process started with a bearer token
file and low caps, in front of the shared test verifier (real model).

- a missing, wrong or malformed token gets UNAUTHENTICATED with one message for all (nothing
  says which), even for bytes that are not a request; health and reflection stay open;
- the caps answer with the setting's name: max_prompt_tokens (INVALID_ARGUMENT "prompt"),
  max_message_bytes (RESOURCE_EXHAUSTED), max_streams_per_client (RESOURCE_EXHAUSTED);
- neither the token nor the prompt text reaches either service's log.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.auth import REFUSED
from specdec.client import Client
from specdec.launcher import Service

TOKEN = "s3cr3t-T0KEN-5f1d9a7c"
SECRET_PROMPT = "Zanzibar quokka 77413 marmalade"
GENERATE = "/specdec.v1.Drafter/Generate"


@pytest.fixture(scope="module")
def drafter(cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("secured")
    token_file = folder / "token"
    token_file.write_text(TOKEN + "\n")
    service = Service(
        "drafter",
        ["--verifier", cluster.verifier.address, "--auth-token-file", str(token_file), "--max-streams-per-client", "2",
         "--max-prompt-tokens", "64", "--max-message-bytes", "65536"],
        folder / "drafter.log",
    )
    try:
        service.wait_serving(60)
        yield service
    finally:
        service.stop()


def _refused(call) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_missing_wrong_or_malformed_tokens_are_refused_alike(drafter: Service) -> None:
    attempts = {
        "missing": None, "wrong": "s3cr3t-T0KEN-5f1d9a7d", "prefix": TOKEN[:-1], "longer": TOKEN + "x", "empty": "",
    }
    for name, token in attempts.items():
        with Client(drafter.address, token=token) as client:
            error = _refused(lambda: client.generate("hi", max_new_tokens=2))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, name
        assert error.details() == REFUSED, name
    with grpc.insecure_channel(drafter.address) as channel:
        for metadata in ((("authorization", f"Basic {TOKEN}"),), (("authorization", TOKEN),)):
            call = channel.unary_stream(GENERATE)
            error = _refused(lambda: list(call(b"\x0a\x02hi", metadata=metadata, timeout=10)))
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED and error.details() == REFUSED
        garbage = channel.unary_stream(GENERATE)  # not a request at all: refused before parsing
        error = _refused(lambda: list(garbage(b"\xff\xff\xff\x07garbage", timeout=10)))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="specdec.v1.Drafter"), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert "specdec.v1.Drafter" in set(ProtoReflectionDescriptorDatabase(channel).get_services())
    with Client(drafter.address, token=TOKEN) as client:
        assert len(client.generate("hi", max_new_tokens=2, temperature=0.0).token_ids) == 2


def test_caps_are_named_in_the_error(drafter: Service) -> None:
    with Client(drafter.address, token=TOKEN) as client:
        error = _refused(lambda: client.generate(token_ids=[42] * 65, max_new_tokens=2))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("prompt:") and "max_prompt_tokens" in error.details()
        error = _refused(lambda: client.generate("word " * 20000, max_new_tokens=2))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # over max_message_bytes, refused unread

        open_streams = [client.stream(messages=[{"role": "user", "content": "Write a long poem."}], max_new_tokens=400,
                                      temperature=0.0, num_draft_tokens=0) for _ in range(2)]
        for stream in open_streams:
            next(stream)
        error = _refused(lambda: client.generate("hi", max_new_tokens=2))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error.details().startswith("max_streams_per_client:")
        for stream in open_streams:
            stream.close()
    with Client(drafter.address, token=TOKEN) as client:  # the ended streams no longer count
        for _ in range(50):
            try:
                client.generate("hi", max_new_tokens=1)
                break
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                threading.Event().wait(0.1)
        else:
            raise AssertionError("the client stayed over its limit after its streams ended")


def test_neither_the_token_nor_the_prompt_reaches_the_logs(drafter: Service, cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(drafter.address, token=TOKEN) as client:
        result = client.generate(SECRET_PROMPT, max_new_tokens=8, temperature=0.0)
        assert result.finish_reason in ("length", "eos")
        with pytest.raises(grpc.RpcError):
            client.generate(SECRET_PROMPT, max_new_tokens=-1)  # an error path too
    with Client(drafter.address, token=TOKEN + "-wrong") as client, pytest.raises(grpc.RpcError):
        client.generate(SECRET_PROMPT, max_new_tokens=2)
    logs = {path: Path(path).read_text() for path in (drafter.log_path, cluster.verifier.log_path, cluster.drafter.log_path)}
    assert any("listening" in text for text in logs.values())  # the logs are really there
    for path, text in logs.items():
        for secret in (TOKEN, SECRET_PROMPT, "quokka"):
            assert secret not in text, f"{secret!r} in {path}"

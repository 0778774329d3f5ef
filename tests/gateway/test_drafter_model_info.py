"""Drafter.GetModelInfo, which the gateway lists models and sizes requests by: the ready
verifiers' model and the drafter's cap, UNAVAILABLE while no verifier is ready."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from drafter_svc.protocol import Defaults
from drafter_svc.resumable_session import ResumePolicy
from specdec.v1 import drafter_pb2, drafter_pb2_grpc
from tests.drafter_svc.test_resumable_session import with_drafter
from tests.fake_verifier import FakeVerifier


def test_model_info_names_the_verifiers_model_and_the_cap(tokenizer) -> None:  # type: ignore[no-untyped-def]
    verifier = FakeVerifier(tokenizer.fingerprint)

    async def body(address: str) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = drafter_pb2_grpc.DrafterStub(channel)
            info = await stub.GetModelInfo(drafter_pb2.GetDrafterModelInfoRequest(), timeout=10)
            assert (info.model_name, info.max_new_tokens_cap) == ("fake", 256) and info.context_length > 0
            verifier.stop()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                for _ in range(100):  # until the pool's next poll finds it gone
                    await stub.GetModelInfo(drafter_pb2.GetDrafterModelInfoRequest(), timeout=10)
                    await asyncio.sleep(0.05)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    try:
        asyncio.run(with_drafter([verifier], tokenizer, ResumePolicy(), body, Defaults("copy", 4, 4, 256)))
    finally:
        verifier.stop()

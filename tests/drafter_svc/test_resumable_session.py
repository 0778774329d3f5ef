"""Resuming a broken verifier session (drafter_svc/resumable_session.py), through a real
in-process drafter server and real gRPC fake verifiers that break their streams on cue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest

from drafter_svc.discovery import StaticDiscovery
from drafter_svc.drafter_models import DrafterModels
from drafter_svc.protocol import Defaults
from drafter_svc.resumable_session import ResumePolicy, resume_seed
from drafter_svc.servicer import DrafterServicer
from drafter_svc.verifier_pool import VerifierPool
from specdec.client import AsyncClient
from specdec.grpc_server import ExceptionToStatusInterceptor
from specdec.v1 import drafter_pb2_grpc
from tests.fake_verifier import FakeVerifier

TOKEN = 42


def test_resume_seed_is_a_function_of_the_request_seed_and_the_tokens_so_far() -> None:
    assert resume_seed(7, 10) == resume_seed(7, 10)
    assert len({resume_seed(7, n) for n in range(100)} | {resume_seed(8, 10)}) == 101
    assert all(0 <= resume_seed(s, n) < 2**63 for s in (0, 2**64 - 1) for n in (0, 5))
    assert resume_seed(None, 3) != resume_seed(None, 3)  # no seed asked: a fresh random one


async def with_drafter(  # type: ignore[no-untyped-def]
    verifiers: list[FakeVerifier], tokenizer, resume: ResumePolicy, body: Callable[[str], Awaitable[None]],
    defaults: Defaults = Defaults("copy", 4, 4, 256), servicers: list[DrafterServicer] | None = None, models: DrafterModels | None = None,
) -> None:
    """Run `body` with the address of an in-process drafter server over `verifiers` (its servicer
    appended to `servicers`, if given; its model drafters where `models` says)."""
    pool = VerifierPool(StaticDiscovery([v.address for v in verifiers]), tokenizer, poll_seconds=0.1)
    server = grpc.aio.server(interceptors=[ExceptionToStatusInterceptor()])
    servicer = DrafterServicer(pool, defaults, resume=resume, models=models)
    if servicers is not None:
        servicers.append(servicer)
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    pool.start()
    try:
        deadline = time.monotonic() + 10
        while sum(m.ready for m in pool.members.values()) < len(verifiers):
            assert time.monotonic() < deadline, "fake verifiers not ready"
            await asyncio.sleep(0.02)
        await body(f"127.0.0.1:{port}")
    finally:
        await server.stop(0)
        await pool.close()


def test_a_broken_stream_moves_to_another_verifier_with_the_tokens_so_far(tokenizer) -> None:  # type: ignore[no-untyped-def]
    breaking = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, break_after_rounds=3)
    spare = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN)
    spare.extra_load = 5  # the session starts on `breaking`, the less loaded one
    prompt = tokenizer.encode("Tell me a story")

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:
            chunks = [c async for c in client.stream(token_ids=prompt, max_new_tokens=8, temperature=0.7, seed=11, num_draft_tokens=0)]
        ids = [t for c in chunks for t in c.token_ids]
        assert ids == [TOKEN] * 8  # none lost, none repeated
        assert chunks[-1].finish_reason == "length" and chunks[-1].stats.resumes == 1

    try:
        asyncio.run(with_drafter([breaking, spare], tokenizer, ResumePolicy(attempts=3, backoff_seconds=0.01), body))
    finally:
        breaking.stop()
        spare.stop()
    assert len(breaking.opens) == 1 and len(spare.opens) == 1
    first, resumed = breaking.opens[0], spare.opens[0]
    assert list(resumed.prompt_token_ids) == [*prompt, TOKEN, TOKEN, TOKEN]
    assert resumed.sampling.seed == resume_seed(11, 3) and first.sampling.seed == 11
    assert resumed.sampling.temperature == pytest.approx(0.7) and resumed.acceptance == first.acceptance
    assert breaking.rounds == 3 and spare.rounds == 5  # the round in flight was sent again, once


def test_a_lone_verifier_takes_the_session_back_once_it_answers_again(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """No other verifier: the re-open waits (backoff) until the pool's next load poll finds the
    broken one answering, then resumes there."""
    lone = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, break_after_rounds=2, break_once=True)

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:
            result = await client.generate(token_ids=[1, 2, 3], max_new_tokens=5, num_draft_tokens=0)
        assert result.token_ids == [TOKEN] * 5 and result.stats.resumes == 1

    try:
        asyncio.run(with_drafter([lone], tokenizer, ResumePolicy(attempts=6, backoff_seconds=0.05), body))
    finally:
        lone.stop()
    assert [list(o.prompt_token_ids) for o in lone.opens] == [[1, 2, 3], [1, 2, 3, TOKEN, TOKEN]]


def test_retries_are_bounded_then_unavailable(tokenizer) -> None:  # type: ignore[no-untyped-def]
    broken = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, break_after_rounds=0)

    async def body(address: str) -> None:
        started = time.monotonic()
        async with AsyncClient(address) as client:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await client.generate(token_ids=[1, 2, 3], max_new_tokens=4, num_draft_tokens=0)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "not resumed in 3 attempts" in caught.value.details()
        assert time.monotonic() - started < 5

    try:
        asyncio.run(with_drafter([broken], tokenizer, ResumePolicy(attempts=3, backoff_seconds=0.05), body))
    finally:
        broken.stop()
    assert 1 <= len(broken.opens) <= 4 and broken.rounds == 0


def test_resume_off_fails_the_generation_at_once(tokenizer) -> None:  # type: ignore[no-untyped-def]
    broken = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, break_after_rounds=1)

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await client.generate(token_ids=[1, 2, 3], max_new_tokens=4, num_draft_tokens=0)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "0 attempts" in caught.value.details()

    try:
        asyncio.run(with_drafter([broken], tokenizer, ResumePolicy(attempts=0), body))
    finally:
        broken.stop()
    assert len(broken.opens) == 1


@pytest.mark.parametrize("broken_after", [1, 0], ids=["after the first verdict", "before it"])
def test_a_stream_broken_before_the_prompts_keys_and_values_resumes_and_the_drafter_reads_the_prompt(  # type: ignore[no-untyped-def]
    tokenizer, onnx_quantized_dir, broken_after: int,
) -> None:
    """The int8 copy of the target asks for the prompt's keys and values; the stream breaks after
    the first verdict, before they come, or before the first verdict itself: the session resumes
    elsewhere without asking again (so nothing waits for them), the drafter reads the prompt
    itself, and no token is lost or repeated."""
    breaking = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, break_after_rounds=broken_after)
    spare = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN)
    spare.extra_load = 5
    prompt = tokenizer.encode("Tell me a story")
    models = DrafterModels({"quantized": onnx_quantized_dir}, tokenizer.fingerprint, prompt_from_verifier_tokens=64)

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:
            result = await asyncio.wait_for(
                client.generate(
                    token_ids=prompt, max_new_tokens=6, temperature=0.0, drafter="onnx-quantized", num_draft_tokens=2, draft_policy="fixed",
                ),
                timeout=60,
            )
        assert result.token_ids == [TOKEN] * 6 and result.stats.resumes == 1
        assert result.stats.prompt_tokens_from_verifier == 0 and result.stats.drafted_tokens > 0

    try:
        asyncio.run(with_drafter([breaking, spare], tokenizer, ResumePolicy(attempts=3, backoff_seconds=0.01), body, models=models))
    finally:
        breaking.stop()
        spare.stop()
    assert [o.return_prompt_cache for o in breaking.opens + spare.opens] == [True, False]
    assert list(spare.opens[0].prompt_token_ids) == [*prompt, *[TOKEN] * broken_after]


def test_a_verifier_that_does_not_say_it_sends_the_prompts_keys_and_values_is_not_asked(tokenizer, onnx_quantized_dir) -> None:  # type: ignore[no-untyped-def]
    """An older verifier ignores OpenSession.return_prompt_cache: its ModelInfo does not set
    sends_prompt_cache, so the int8 drafter reads the prompt itself instead of waiting."""
    older = FakeVerifier(tokenizer.fingerprint, next_token=TOKEN, sends_prompt_cache=False)
    models = DrafterModels({"quantized": onnx_quantized_dir}, tokenizer.fingerprint, prompt_from_verifier_tokens=64)

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:
            result = await asyncio.wait_for(
                client.generate(
                    token_ids=tokenizer.encode("Tell me a story"), max_new_tokens=4, temperature=0.0, drafter="onnx-quantized",
                    num_draft_tokens=2, draft_policy="fixed",
                ),
                timeout=60,
            )
        assert result.token_ids == [TOKEN] * 4 and result.stats.prompt_tokens_from_verifier == 0 and result.stats.drafted_tokens > 0

    try:
        asyncio.run(with_drafter([older], tokenizer, ResumePolicy(attempts=1, backoff_seconds=0.01), body, models=models))
    finally:
        older.stop()
    assert [o.return_prompt_cache for o in older.opens] == [False]

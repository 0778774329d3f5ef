"""The drafter servicer's choice of drafter by load, through a real in-process drafter server and
a real gRPC fake verifier."""

from __future__ import annotations

import asyncio

from drafter_svc.protocol import Defaults
from drafter_svc.servicer import DrafterServicer
from drafter_svc.resumable_session import ResumePolicy
from specdec.client import AsyncClient
from tests.drafter_svc.test_resumable_session import with_drafter
from tests.fake_verifier import FakeVerifier


def test_requests_that_name_no_drafter_get_the_busy_drafter_while_others_are_served(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A request that arrives while another generation streams gets the busy drafter; one that
    arrives alone, before or after, gets the default drafter."""
    verifier = FakeVerifier(tokenizer.fingerprint, round_seconds=0.02)
    prompt = tokenizer.encode("Tell me a story")

    async def body(address: str) -> None:
        async with AsyncClient(address) as client:

            async def drafter_used(max_new_tokens: int = 8) -> str:
                chunks = [c async for c in client.stream(token_ids=prompt, max_new_tokens=max_new_tokens, temperature=0.0)]
                return chunks[-1].stats.drafter

            first = asyncio.ensure_future(drafter_used(max_new_tokens=40))
            while verifier.rounds == 0:  # the first generation is under way
                await asyncio.sleep(0.01)
            during = await asyncio.gather(drafter_used(), drafter_used())
            assert not first.done()
            assert (await first, during) == ("ngram", ["copy", "copy"])
            assert await drafter_used() == "ngram"

    try:
        asyncio.run(with_drafter([verifier], tokenizer, ResumePolicy(), body, Defaults("ngram", 4, 4, 256, busy_drafter="copy")))
    finally:
        verifier.stop()


def test_the_pass_costs_start_from_the_verifiers_own_timings(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A verifier on a fast device reports passes of 10-13 ms (ModelInfo.pass_seconds); the drafter
    process prices rounds by them from its first session on, not by this CPU's 57 ms prior."""
    verifier = FakeVerifier(tokenizer.fingerprint, pass_seconds=(0.010, 0.011, 0.011, 0.012, 0.013))
    servicers: list[DrafterServicer] = []
    prompt = tokenizer.encode("Tell me a story")

    async def body(address: str) -> None:
        state = servicers[0].policies
        assert not state.costs_seeded and state.costs.plain(128) > 0.05
        async with AsyncClient(address) as client:
            [c async for c in client.stream(token_ids=prompt, max_new_tokens=4, temperature=0.0)]
        assert state.costs_seeded and state.costs.plain(128) < 0.015

    try:
        asyncio.run(with_drafter([verifier], tokenizer, ResumePolicy(), body, servicers=servicers))
    finally:
        verifier.stop()


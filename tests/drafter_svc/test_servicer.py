"""The drafter servicer's choice of drafter by load, through a real in-process drafter server and
a real gRPC fake verifier."""

from __future__ import annotations

import asyncio

from drafter_svc import generation
from drafter_svc.policies.session_policy import SessionPolicy
from drafter_svc.protocol import Defaults
from drafter_svc.servicer import DrafterServicer
from drafter_svc.resumable_session import ResumePolicy
from specdec.client import AsyncClient
from specdec.round_price import RoundPrice
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


def test_a_session_starts_with_the_verifiers_measured_price_not_a_prior(tokenizer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A verifier on a fast device prices a first round at 4 ms plain passes (its ModelInfo); the
    drafter's first session prices its first round, a model step included, by that price, and
    each later round by the price its last verdict carried. The drafter holds no pass costs of
    its own."""
    start = RoundPrice(node_cost=0.02, round_overhead=0.05, plain_seconds=0.004)
    later = RoundPrice(node_cost=0.03, round_overhead=0.0, plain_seconds=0.005)
    verifier = FakeVerifier(tokenizer.fingerprint, price=start, verdict_price=later)
    servicers: list[DrafterServicer] = []
    prompt = tokenizer.encode("Tell me a story")
    created: list[tuple[SessionPolicy, RoundPrice, RoundPrice, float]] = []

    def recording(*args, **kwargs) -> SessionPolicy:  # type: ignore[no-untyped-def]
        policy = SessionPolicy(*args, **kwargs)
        created.append((policy, policy.price, policy.cost(), policy.step_cost(0.002)))
        return policy

    monkeypatch.setattr(generation, "SessionPolicy", recording)

    async def body(address: str) -> None:
        state = servicers[0].policies
        assert not state.last_price.known and not hasattr(state, "costs")
        async with AsyncClient(address) as client:
            [c async for c in client.stream(token_ids=prompt, max_new_tokens=4, temperature=0.0)]
        assert state.last_price == later

    try:
        asyncio.run(with_drafter([verifier], tokenizer, ResumePolicy(), body, servicers=servicers))
    finally:
        verifier.stop()
    policy, first_price, first_cost, first_step = created[0]
    assert first_price == start
    # the first round's pass also reads the prompt: that pass is the unit, by the verifier's price
    assert first_cost == start.with_pending(len(prompt) - 1)
    assert first_step == 0.002 / first_cost.plain_seconds
    assert policy.price == later and policy.step_cost(0.002) == 0.002 / later.plain_seconds

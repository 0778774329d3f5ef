"""generation: the round loop, against a verifier stand-in on a loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc
import numpy as np
import pytest

from drafter_svc.generation import generate
from drafter_svc.onnx_drafter import OnnxDrafter
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.protocol import GenerationRequest
from drafter_svc.round_loop import LONG_PROMPT_TOKENS
from drafter_svc.verifier_info import VerifierInfo
from specdec.round_price import RoundPrice
from specdec.sampling_params import SamplingParams
from specdec.v1 import verifier_pb2_grpc
from tests.fake_verifier import FakeVerifier

SLOW = RoundPrice(node_cost=0.001, round_overhead=0.0, plain_seconds=1.0)  # plain passes of a second


@pytest.mark.parametrize("overlap", [False, True])
def test_after_a_long_prompt_the_model_reads_it_beside_the_prefill_only_with_overlap_on(
    overlap: bool, tokenizer, onnx_quantized_dir, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """The first round after a long prompt sends no model draft. With overlap off (shared cores)
    the drafter does not run its model while the verifier prefills: it reads the prompt at its
    first draft, in a later round. With overlap on (cores of its own) it reads it during the
    prefill, before the first verdict. The verifier prices its plain passes at a second, so
    the read and the drafts pay (whatever the model's timings, which earlier tests have set)."""
    verifier = FakeVerifier(tokenizer.fingerprint, next_token=42, round_seconds=0.2)  # room for work beside a pass
    policies = PolicyState()
    runs: list[int] = []  # for each model call, the rounds the verifier had answered
    next_logits = OnnxDrafter.next_logits

    def spy(self: OnnxDrafter, context: Sequence[int]) -> np.ndarray:
        runs.append(verifier.answered)
        return next_logits(self, context)

    monkeypatch.setattr(OnnxDrafter, "next_logits", spy)
    request = GenerationRequest(
        prompt_token_ids=[1000 + i % 3000 for i in range(2 * LONG_PROMPT_TOKENS)], max_new_tokens=3,
        sampling=SamplingParams(0.0), seed=None, stop=[], drafter="hybrid", num_draft_tokens=6, max_tree_nodes=6,
        draft_policy="auto", overlap=overlap,
    )

    async def run() -> list[int]:
        async with grpc.aio.insecure_channel(verifier.address) as channel:
            responses = generate(request, verifier_pb2_grpc.VerifierStub(channel), tokenizer, VerifierInfo(frozenset({2}), 8192, SLOW), policies)
            return [t async for response in responses for t in response.token_ids]

    try:
        assert asyncio.run(run()) == [42, 42, 42]
    finally:
        verifier.stop()
    assert runs and (runs[0] == 0) == overlap

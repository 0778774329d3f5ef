"""generation: the round loop, against an in-process stand-in for a verifier's stream."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from drafter_svc.draft_policy import PolicyState
from drafter_svc.generation import LONG_PROMPT_TOKENS, VerifierInfo, generate
from drafter_svc.onnx_drafter import OnnxDrafter
from drafter_svc.protocol import GenerationRequest
from specdec.sampling_params import SamplingParams
from specdec.v1 import verifier_pb2

PASS_SECONDS = 0.2  # each verdict's delay: room for the drafter's work beside the pass


class FakeStream:
    """One Verify stream: each round is answered after PASS_SECONDS with nothing accepted and
    token 42, as tests/fake_verifier.py answers; `verdicts` counts the answers read."""

    def __init__(self) -> None:
        self.verdicts = 0
        self.nodes = 0

    async def write(self, message: verifier_pb2.VerifyRequest) -> None:
        if message.HasField("round"):
            self.nodes = len(message.round.nodes)

    async def read(self) -> verifier_pb2.VerifyResponse:
        await asyncio.sleep(PASS_SECONDS)
        self.verdicts += 1
        return verifier_pb2.VerifyResponse(next_token_id=42, acceptance_probs=[0.0] * self.nodes, verify_seconds=PASS_SECONDS)

    async def done_writing(self) -> None:
        pass

    def cancel(self) -> None:
        pass


class FakeStub:
    def __init__(self) -> None:
        self.stream = FakeStream()

    def Verify(self) -> FakeStream:  # noqa: N802 (the gRPC method's name)
        return self.stream


@pytest.mark.parametrize("overlap", [False, True])
def test_after_a_long_prompt_the_model_reads_it_beside_the_prefill_only_with_overlap_on(
    overlap: bool, tokenizer, onnx_quantized_dir, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """The first round after a long prompt sends no model draft. With overlap off (shared cores)
    the drafter does not run its model while the verifier prefills: it reads the prompt at its
    first draft, in a later round. With overlap on (cores of its own) it reads it during the
    prefill, before the first verdict. The process's verifier said its passes take a second, so
    the read and the drafts pay (whatever the model's timings, which earlier tests have set)."""
    policies = PolicyState()
    policies.seed_costs([1.0] * 8, LONG_PROMPT_TOKENS)
    runs: list[int] = []  # for each model call, the verdicts read before it
    stub = FakeStub()
    next_logits = OnnxDrafter.next_logits

    def spy(self: OnnxDrafter, context: Sequence[int]) -> np.ndarray:
        runs.append(stub.stream.verdicts)
        return next_logits(self, context)

    monkeypatch.setattr(OnnxDrafter, "next_logits", spy)
    request = GenerationRequest(
        prompt_token_ids=[1000 + i % 3000 for i in range(2 * LONG_PROMPT_TOKENS)], max_new_tokens=3,
        sampling=SamplingParams(0.0), seed=None, stop=[], drafter="hybrid", num_draft_tokens=6, max_tree_nodes=6,
        draft_policy="auto", overlap=overlap,
    )

    async def run() -> list[int]:
        responses = generate(request, stub, tokenizer, VerifierInfo(frozenset({2}), 8192), policies)  # type: ignore[arg-type]
        return [t async for response in responses for t in response.token_ids]

    assert asyncio.run(run()) == [42, 42, 42]
    assert runs and (runs[0] == 0) == overlap

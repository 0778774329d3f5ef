"""Passes run ahead through the real verifier (the shared cluster: onnxruntime's passes): a greedy
session opened with the plain hint and sent any mix of empty rounds and drafted chains, each after
a random turnaround (none, so the round may arrive before the pass run ahead starts; while it
runs; after it), commits exactly transformers' greedy continuation, and the verifier's metrics
show passes run ahead both taken and dropped."""

from __future__ import annotations

import asyncio
import random

import grpc
import torch
from transformers import GenerationConfig

from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc
from tests.conftest import verifier_metrics

NEW_TOKENS = 48
PROMPT = "The lighthouse keeper climbed the stairs every evening, and on the last night of the year he"
TURNAROUNDS_S = [0.0, 0.0, 0.002, 0.01, 0.04]


def greedy_continuation(reference_model, prompt: list[int]) -> list[int]:  # type: ignore[no-untyped-def]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS + 8, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        out = reference_model.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt) :].tolist()


async def mixed_rounds(address: str, prompt: list[int], expected: list[int], rng: random.Random) -> list[int]:
    """Rounds until NEW_TOKENS are committed: mostly empty; else a chain of the next 0-3 greedy
    tokens and one wrong token. Returns the committed tokens."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = verifier_pb2_grpc.VerifierStub(channel).Verify()
        sampling = common_pb2.SamplingParams(temperature=0.0)
        await call.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=sampling, plain=True)))
        out: list[int] = []
        while len(out) < NEW_TOKENS:
            tokens: list[int] = []
            if rng.random() < 0.25:
                right = expected[len(out) : len(out) + rng.randint(0, 3)]
                tokens = [*right, (expected[len(out) + len(right)] + 1) % 49152]
            nodes = [verifier_pb2.DraftNode(parent=i - 1, token_id=t, q=common_pb2.SparseDistribution(token_ids=[t], probs=[1.0])) for i, t in enumerate(tokens)]
            await call.write(verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=nodes)))
            verdict = await call.read()
            out += [tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token_id]
            await asyncio.sleep(rng.choice(TURNAROUNDS_S))
        await call.write(verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession()))
        await call.done_writing()
        call.cancel()
    return out


def test_any_mix_of_rounds_after_the_plain_hint_commits_the_greedy_continuation(cluster, tokenizer, reference_model) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode(PROMPT)
    expected = greedy_continuation(reference_model, prompt)
    before = verifier_metrics(cluster)
    for seed in range(3):
        out = asyncio.run(mixed_rounds(cluster.verifier.address, prompt, expected, random.Random(seed)))
        assert out == expected[: len(out)], f"seed {seed}"
    after = verifier_metrics(cluster)
    used = after["specdec_verifier_ahead_passes_used"] - before["specdec_verifier_ahead_passes_used"]
    dropped = after["specdec_verifier_ahead_passes"] - before["specdec_verifier_ahead_passes"] - used
    assert used > 0 and dropped > 0, (used, dropped)

"""`--dtype bfloat16`: the verifier serves the default model in bfloat16 (and with
`--quantization int8` its linear layers' weights in int8) and its greedy output, speculating with
copy-drafter trees and chains, is transformers' own greedy generate() of that model in bfloat16
(so quantized), token for token.

Two computations of the same bfloat16 logits that sum in another order (generate() scores one
token per pass; the verifier scores several under a tree mask) can break a near tie either way:
a divergence is allowed only where the reference's own logits of the two tokens are within
GREEDY_TIE (two bfloat16 steps at logits of 32-64, at most), and then the rest of that output is not
compared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch

from specdec.client import AsyncClient, GenerationResult
from specdec.launcher import LocalCluster
from tests.conftest import bfloat16_default_model, services
from tests.integration.prompts import CHAT_PROMPTS, TEXT_PROMPTS

MAX_NEW_TOKENS = 16
GREEDY_TIE = 0.5
PROMPTS = [("chat", CHAT_PROMPTS[0]), ("chat", CHAT_PROMPTS[3]), ("text", TEXT_PROMPTS[1])]
# (draft length, tree nodes): trees up to 4 deep with several branches where the copy drafter
# finds them, chains where it finds one.
DRAFTS = [(4, 8)]


QUANTIZATIONS = ("none", "int8")


@pytest.fixture(scope="module", params=QUANTIZATIONS)
def quantization(request) -> str:  # type: ignore[no-untyped-def]
    return request.param


@pytest.fixture(scope="module")
def bfloat16_cluster(tmp_path_factory: pytest.TempPathFactory, quantization: str) -> Iterator[LocalCluster]:
    logs = tmp_path_factory.mktemp(f"bfloat16-{quantization}-logs")
    with services(logs, "--dtype", "bfloat16", "--quantization", quantization, "--tune-pass-sizes", "false") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def bfloat16_model(quantization: str):  # type: ignore[no-untyped-def]
    return bfloat16_default_model(quantization)


def _ids(tokenizer, kind: str, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    return tokenizer.encode_chat([{"role": "user", "content": prompt}]) if kind == "chat" else tokenizer.encode(prompt)


def test_bfloat16_greedy_equals_transformers_generate(bfloat16_cluster, bfloat16_model, tokenizer, quantization: str) -> None:  # type: ignore[no-untyped-def]
    eos = set(tokenizer.eos_token_ids)

    async def generate_all() -> list[GenerationResult]:
        async with AsyncClient(bfloat16_cluster.address) as client:
            return await asyncio.gather(*(
                client.generate(
                    token_ids=_ids(tokenizer, kind, prompt), max_new_tokens=MAX_NEW_TOKENS, temperature=0.0,
                    drafter="copy", num_draft_tokens=k, max_tree_nodes=nodes, draft_policy="fixed",
                )
                for kind, prompt in PROMPTS for k, nodes in DRAFTS
            ))

    results = iter(asyncio.run(generate_all()))
    identical = drafted = 0
    for kind, prompt in PROMPTS:
        ids = _ids(tokenizer, kind, prompt)
        with torch.inference_mode():
            x = torch.tensor([ids])
            new = bfloat16_model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=MAX_NEW_TOKENS)[0, len(ids):].tolist()
        reference = new[: next((j for j, t in enumerate(new) if t in eos), len(new))]
        for k, nodes in DRAFTS:
            result = next(results)
            drafted += result.stats.drafted_tokens
            ours = result.token_ids
            if ours == reference:
                identical += 1
                continue
            j = next((j for j, (a, b) in enumerate(zip(ours, reference)) if a != b), min(len(ours), len(reference)))
            assert j < min(len(ours), len(reference)), f"{prompt[:30]!r} k={k}: one output is a prefix of the other (a wrong stop)"
            with torch.inference_mode():
                logits = bfloat16_model(torch.tensor([ids + reference[:j]])).logits[0, -1].float()
            gap = (logits[reference[j]] - logits[ours[j]]).item()
            print(f"\n{prompt[:30]!r} k={k} nodes={nodes}: token {j} differs ({reference[j]} vs {ours[j]}), logits {gap:.3f} apart")
            assert abs(gap) <= GREEDY_TIE, f"{prompt[:30]!r} k={k}: a divergence at token {j} where the reference has no near tie"
    print(f"\nbfloat16, quantization {quantization}: {identical} of {len(PROMPTS) * len(DRAFTS)} greedy outputs identical to generate()")
    assert drafted > 0  # the copy drafter really proposed tokens, so multi-token passes were scored
    assert identical > 0  # a near tie in every output would mean the prompts test nothing past it

"""Greedy identity: at temperature 0 our output equals transformers' own greedy generate,
token for token, for both drafters, draft lengths 1, 4 and 8 (and no speculation), as chains and
as token trees (one and several branches per node, up to the verifier's 16 nodes)."""

from __future__ import annotations

import pytest
import torch

from specdec.client import Client
from tests.integration.prompts import CHAT_PROMPTS, TEXT_PROMPTS

MAX_NEW_TOKENS = 40
CASES = [("chat", p) for p in CHAT_PROMPTS] + [("text", p) for p in TEXT_PROMPTS]


def _prompt_ids(tokenizer, kind: str, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    if kind == "chat":
        return tokenizer.encode_chat([{"role": "user", "content": prompt}])
    return tokenizer.encode(prompt)


@pytest.fixture(scope="module")
def reference_outputs(reference_model, tokenizer) -> dict[int, list[int]]:  # type: ignore[no-untyped-def]
    """transformers' greedy generate, cut at EOS (our streams do not include the EOS token)."""
    outputs = {}
    for i, (kind, prompt) in enumerate(CASES):
        ids = torch.tensor([_prompt_ids(tokenizer, kind, prompt)])
        with torch.inference_mode():
            out = reference_model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS
            )
        new = out[0, ids.shape[1]:].tolist()
        outputs[i] = [t for t in new[: next((j for j, t in enumerate(new) if t in tokenizer.eos_token_ids), len(new))]]
    return outputs


CONFIGS = [
    # (drafter, draft length, tree nodes: = length is a chain)
    ("copy", 0, 0), ("copy", 1, 1), ("copy", 8, 8), ("ngram", 4, 4),
    ("copy", 1, 4), ("copy", 4, 16), ("ngram", 8, 16),
]


@pytest.mark.parametrize("drafter,k,nodes", CONFIGS)
def test_greedy_output_equals_transformers_generate(cluster, tokenizer, reference_outputs, drafter: str, k: int, nodes: int) -> None:  # type: ignore[no-untyped-def]
    drafted = 0
    with Client(cluster.address) as client:
        for i, (kind, prompt) in enumerate(CASES):
            result = client.generate(
                token_ids=_prompt_ids(tokenizer, kind, prompt), max_new_tokens=MAX_NEW_TOKENS,
                temperature=0.0, drafter=drafter, num_draft_tokens=k, max_tree_nodes=nodes,
            )
            assert result.token_ids == reference_outputs[i], f"prompt {i} ({prompt[:40]!r})"
            expected = "eos" if len(reference_outputs[i]) < MAX_NEW_TOKENS else "length"
            assert result.finish_reason == expected
            assert result.text == tokenizer.decode(result.token_ids)
            drafted += result.stats.drafted_tokens
    # The speculative configurations really speculated (otherwise this test proves nothing).
    assert (drafted > 0) == (k > 0)

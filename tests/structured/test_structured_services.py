"""Structured output through the real services on the default model: greedy output under a JSON
Schema equals transformers' generate() with llguidance's mask as a logits processor (copy drafter
chains and trees; the grammar's forced tokens drafted and counted); logprobs equal transformers'
log-softmax for accepted, recovered and bonus tokens alike, top alternatives sorted."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from transformers import LogitsProcessorList

from specdec.client import Client
from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint
from tests.structured.reference import GrammarLogitsProcessor

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"enum": ["Paris", "London", "Berlin", "Other"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PROMPT = "Extract the person as JSON with name, age and city: Marie is 34 and lives in Paris."
MAX_NEW_TOKENS = 40
# Log-probabilities from the verifier's tree passes against one plain transformers pass over the
# same tokens (float32 on CPU; the bound).
LOGPROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def compiler(tokenizer) -> GrammarCompiler:  # type: ignore[no-untyped-def]
    return GrammarCompiler(tokenizer.to_json(), tokenizer.eos_token_ids, tokenizer.vocab_size)


@pytest.fixture(scope="module")
def prompt_ids(tokenizer) -> list[int]:  # type: ignore[no-untyped-def]
    return tokenizer.encode_chat([{"role": "user", "content": PROMPT}])


@pytest.fixture(scope="module")
def expected(reference_model, compiler: GrammarCompiler, prompt_ids: list[int], tokenizer) -> list[int]:  # type: ignore[no-untyped-def]
    constraint = OutputConstraint("json_schema", json.dumps(SCHEMA))
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = reference_model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
            logits_processor=LogitsProcessorList([GrammarLogitsProcessor(compiler, constraint, len(prompt_ids))]),
        )
    new = out[0, len(prompt_ids):].tolist()
    return new[: next((i for i, t in enumerate(new) if t in tokenizer.eos_token_ids), len(new))]


@pytest.mark.parametrize("shape", [(0, None), (4, None), (4, 8)], ids=["plain", "chain", "tree"])
def test_greedy_json_equals_generate_with_the_grammar_processor(cluster, expected: list[int], tokenizer, shape) -> None:  # type: ignore[no-untyped-def]
    k, nodes = shape
    with Client(cluster.address) as client:
        result = client.generate(
            messages=[{"role": "user", "content": PROMPT}], max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, drafter="copy",
            num_draft_tokens=k, max_tree_nodes=nodes, draft_policy="fixed", json_schema=json.dumps(SCHEMA),
        )
    assert result.token_ids == expected
    if result.finish_reason == "eos":
        jsonschema.validate(json.loads(result.text), SCHEMA)
    if k:
        assert result.stats.forced_tokens > 0  # '{"name":"' and the other keys are forced


def test_logprobs_equal_transformers_log_softmax(cluster, reference_model, prompt_ids: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Seeded at temperature 1 with the copy drafter's chains: accepted, recovered and bonus
    tokens all carry the target's log-softmax at their position; the top 5 sorted, the emitted
    token's own logprob among them when it ranks there."""
    with Client(cluster.address) as client:
        result = client.generate(
            messages=[{"role": "user", "content": PROMPT}], max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=3, drafter="copy",
            num_draft_tokens=4, logprobs=True, top_logprobs=5,
        )
    assert len(result.logprobs) == len(result.token_ids) > 0
    ids = torch.tensor([prompt_ids + result.token_ids])
    with torch.inference_mode():
        reference = torch.log_softmax(reference_model(ids).logits[0, len(prompt_ids) - 1 : -1].float(), dim=-1)
    for position, (token, lp) in enumerate(zip(result.token_ids, result.logprobs)):
        assert lp.token_id == token
        assert abs(lp.logprob - float(reference[position, token])) <= LOGPROB_ATOL, position
        top_ids = [t for t, _ in lp.top]
        top_values = [v for _, v in lp.top]
        assert len(lp.top) == 5 and top_values == sorted(top_values, reverse=True)
        expected_top = torch.topk(reference[position], 5)
        assert torch.allclose(torch.tensor(top_values), expected_top.values, atol=LOGPROB_ATOL)
        assert set(top_ids) == set(expected_top.indices.tolist()) or len(set(expected_top.values.tolist())) < 5


def test_no_logprobs_unless_asked(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        result = client.generate("Hello", max_new_tokens=4, temperature=0.0)
    assert result.logprobs == []

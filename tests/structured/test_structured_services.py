"""Structured output through the real services on the default model: greedy output under a JSON
Schema equals transformers' generate() with llguidance's mask as a logits processor (copy drafter
chains and trees, the model drafters along the grammar; the grammar's forced tokens drafted and
counted); logprobs equal transformers'
log-softmax, top alternatives sorted and correct: through the drafter, and through the verifier
for rounds drafted so that accepted, recovered and bonus tokens each occur (the verdicts say which)."""

from __future__ import annotations

import json

import grpc
import jsonschema
import pytest
import torch
from transformers import LogitsProcessorList

from specdec.client import Client
from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc
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


@pytest.mark.parametrize("drafter", ["onnx-quantized", "hybrid"])
def test_greedy_json_with_a_model_drafter_along_the_grammar_equals_generate(  # type: ignore[no-untyped-def]
    cluster, onnx_quantized_dir, expected: list[int], drafter: str
) -> None:
    """The model drafter drafts from q masked to the grammar, with the forced tokens in its chain
    (drafter_svc/draft_guide.py), at the service's default draft length and policy."""
    with Client(cluster.address) as client:
        result = client.generate(
            messages=[{"role": "user", "content": PROMPT}], max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, drafter=drafter,
            json_schema=json.dumps(SCHEMA),
        )
    assert result.token_ids == expected
    assert result.stats.forced_tokens > 0 and result.stats.accepted_tokens > 0


def check_logprob(reference: torch.Tensor, position: int, token: int, lp_token: int, logprob: float, top_ids: list[int],
                  top_values: list[float]) -> None:
    """One emitted token's logprob and top 5 against transformers' log-softmax [positions, vocab]."""
    assert lp_token == token
    assert abs(logprob - float(reference[position, token])) <= LOGPROB_ATOL, position
    assert len(top_values) == 5 and top_values == sorted(top_values, reverse=True)
    expected_top = torch.topk(reference[position], 5)
    assert torch.allclose(torch.tensor(top_values), expected_top.values, atol=LOGPROB_ATOL)
    assert set(top_ids) == set(expected_top.indices.tolist()) or len(set(expected_top.values.tolist())) < 5


def reference_log_softmax(reference_model, prompt_ids: list[int], generated: list[int]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """[len(generated), vocab] transformers' log-softmax at each generated token's position."""
    ids = torch.tensor([prompt_ids + generated])
    with torch.inference_mode():
        return torch.log_softmax(reference_model(ids).logits[0, len(prompt_ids) - 1 : -1].float(), dim=-1)


def test_logprobs_equal_transformers_log_softmax(cluster, reference_model, prompt_ids: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Seeded at temperature 1 with the copy drafter's chains, through the drafter: every
    emitted token carries the target's log-softmax at its position; the top 5 sorted."""
    with Client(cluster.address) as client:
        result = client.generate(
            messages=[{"role": "user", "content": PROMPT}], max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=3, drafter="copy",
            num_draft_tokens=4, logprobs=True, top_logprobs=5,
        )
    assert len(result.logprobs) == len(result.token_ids) > 0
    reference = reference_log_softmax(reference_model, prompt_ids, result.token_ids)
    for position, (token, lp) in enumerate(zip(result.token_ids, result.logprobs)):
        check_logprob(reference, position, token, lp.token_id, lp.logprob, [t for t, _ in lp.top], [v for _, v in lp.top])


def _verify(cluster, opening: verifier_pb2.OpenSession, rounds: list[list[tuple[int, int]]]) -> list[verifier_pb2.VerifyResponse]:  # type: ignore[no-untyped-def]
    """One verifier session: the opening, then rounds of (token, parent) point-mass nodes."""
    requests = [verifier_pb2.VerifyRequest(open=opening)]
    for nodes in rounds:
        drafted = [verifier_pb2.DraftNode(parent=p, token_id=t, q=common_pb2.SparseDistribution(token_ids=[t], probs=[1.0])) for t, p in nodes]
        requests.append(verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=drafted)))
    requests.append(verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession()))
    with grpc.insecure_channel(cluster.verifier.address) as channel:
        return list(verifier_pb2_grpc.VerifierStub(channel).Verify(iter(requests)))


def test_logprobs_of_accepted_recovered_and_bonus_tokens(cluster, reference_model, prompt_ids: list[int], tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A seeded session at temperature 1 under the JSON Schema emits the exponential race's tokens
    whatever is drafted (common.proto, SamplingParams.seed). A first session of plain rounds learns
    them; a second drafts them right (accepted, then a bonus token after a leaf) and wrong
    (recovered), as chains and a tree. Each emitted token's kind is read from its round's verdict;
    all three kinds occur, and each token's logprob and top 5 equal transformers' log-softmax."""
    opening = verifier_pb2.OpenSession(
        prompt_token_ids=prompt_ids, sampling=common_pb2.SamplingParams(temperature=1.0, seed=11),
        constraint=common_pb2.OutputConstraint(json_schema=json.dumps(SCHEMA)), logprobs=True, top_logprobs=5,
    )
    race = [r.next_token_id for r in _verify(cluster, opening, [[] for _ in range(16)])]
    wrong = [t - 1 if t else 1 for t in race]  # never the race's token at that position
    rounds = [
        [(race[0], -1), (race[1], 0), (race[2], 1)],  # accepted x3, then race[3] bonus
        [(race[4], -1), (wrong[5], 0)],  # accepted, then race[5] recovered
        [(wrong[6], -1)],  # race[6] recovered
        [(wrong[7], -1), (race[7], -1), (race[8], 1)],  # a tree: the right branch accepted x2, then race[9] bonus
        [(race[10], -1), (race[11], 0), (wrong[12], 1), (race[12], 1)],  # accepted x3 past a wrong sibling, race[13] bonus
    ]
    assert not set(race[:14]) & set(tokenizer.eos_token_ids), "the rounds below need 14 tokens before the end"
    verdicts = _verify(cluster, opening, rounds)
    emitted: list[int] = []
    kinds: list[str] = []
    logprobs: list[common_pb2.TokenLogprob] = []
    for nodes, verdict in zip(rounds, verdicts):
        accepted = [nodes[i][0] for i in verdict.accepted_nodes]
        emitted += [*accepted, verdict.next_token_id]
        kinds += ["accepted"] * len(accepted) + ["bonus" if verdict.next_is_bonus else "recovered"]
        logprobs += verdict.logprobs
    assert emitted == race[: len(emitted)], "a seeded session emits the race's tokens whatever is drafted"
    assert kinds == ["accepted"] * 3 + ["bonus", "accepted", "recovered", "recovered"] + ["accepted"] * 2 + ["bonus"] + ["accepted"] * 3 + ["bonus"]
    assert len(logprobs) == len(emitted)
    reference = reference_log_softmax(reference_model, prompt_ids, emitted)
    for position, (token, lp) in enumerate(zip(emitted, logprobs)):
        check_logprob(reference, position, token, lp.token_id, lp.logprob, list(lp.top_token_ids), list(lp.top_logprobs))


def test_no_logprobs_unless_asked(cluster) -> None:  # type: ignore[no-untyped-def]
    with Client(cluster.address) as client:
        result = client.generate("Hello", max_new_tokens=4, temperature=0.0)
    assert result.logprobs == []

"""A verifier session against the real model, in-process: the KV cache after rounds with
rejections gives the same next-token logits as a fresh pass over the committed tokens."""

from __future__ import annotations

import pytest
import torch

from specdec.errors import FailedPrecondition, InvalidArgument
from specdec.sampling_params import SamplingParams
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel


def point_masses(tokens: list[int]) -> RoundInput:
    return RoundInput(tokens, [[t] for t in tokens], [[1.0] for _ in tokens])


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


def fresh_logits(target: TargetModel, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return target.model(torch.tensor([tokens])).logits[0, -1].float()


def test_rolled_back_cache_matches_a_fresh_pass(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    session = Session(target, prompt, SamplingParams(temperature=0.0), seed=0, limits=Limits(16, 8192))
    junk = tokenizer.encode(" banana banana banana banana")  # drafts the target rejects
    rejected = 0
    for drafts in ([], junk, junk[:1], [], junk):
        verdict = session.verify(point_masses(drafts))
        rejected += len(drafts) - verdict.num_accepted
        assert len(session.cache) == len(session.tokens) - 1
    assert rejected > 0  # the rollback path really ran
    # The next round sees exactly what a fresh forward over the committed tokens sees.
    pending = session.tokens[len(session.cache):]
    cached = target.score(session.cache, pending, num_logits=1)[0]
    torch.testing.assert_close(cached, fresh_logits(target, session.tokens), atol=2e-4, rtol=1e-4)


def test_accepted_drafts_are_committed_with_the_next_token(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("1, 2, 3, 4, 5, 6,")
    greedy = Session(target, prompt, SamplingParams(temperature=0.0), seed=0, limits=Limits(16, 8192))
    plain = [greedy.verify(point_masses([])).next_token for _ in range(4)]
    session = Session(target, prompt, SamplingParams(temperature=0.0), seed=0, limits=Limits(16, 8192))
    verdict = session.verify(point_masses(plain[:3]))
    assert verdict.num_accepted == 3 and verdict.is_bonus and verdict.next_token == plain[3]
    assert session.tokens == prompt + plain


def test_padded_short_pass_scores_like_an_unpadded_one(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("Speculative decoding is")
    unpadded = TargetModel(target.model, "unpadded")
    unpadded.min_pass_tokens = 1
    assert target.min_pass_tokens > 2  # on CPU a 2-token pass is padded
    results = []
    for model in (target, unpadded):
        cache = model.new_cache()
        model.score(cache, prompt, num_logits=1)
        cache.truncate(len(prompt) - 1)
        logits = model.score(cache, [prompt[-1], 11], num_logits=2)  # a 2-token pass
        assert len(cache) == len(prompt) + 1  # the padding left no cache entries behind
        results.append((logits, model.score(cache, [42], num_logits=1)))
    torch.testing.assert_close(results[0][0], results[1][0], atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-4, rtol=1e-4)


def test_session_limits(target: TargetModel) -> None:
    limits = Limits(max_draft_tokens=2, context_length=8)
    with pytest.raises(InvalidArgument, match="open.prompt_token_ids"):
        Session(target, [1] * 8, SamplingParams(), seed=0, limits=limits)
    session = Session(target, [1] * 6, SamplingParams(), seed=0, limits=limits)
    with pytest.raises(InvalidArgument, match="exceed this verifier's limit"):
        session.verify(point_masses([5, 5, 5]))
    with pytest.raises(InvalidArgument, match="context length"):
        session.verify(point_masses([5, 5]))  # 6 + 2 + 1 > 8
    session.closed = True
    with pytest.raises(FailedPrecondition):
        session.verify(point_masses([]))

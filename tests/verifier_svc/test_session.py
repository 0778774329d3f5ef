"""A verifier session against the real model, in-process: the tree pass scores every node as a
plain chain over its path would, and the KV cache after rounds with rejections gives the same
next-token logits as a fresh pass over the committed tokens."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from specdec.acceptance_params import AcceptanceParams
from specdec.errors import FailedPrecondition, InvalidArgument
from specdec.penalties import Penalties
from specdec.sampling_params import SamplingParams
from verifier_svc.output_rules import OutputOptions
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain

# fp32 on CPU: the tree pass and a chain pass differ only in summation order (other shapes,
# masked keys). Measured: at most 8e-5 in log-probabilities; 2e-4 leaves room across BLAS builds.
LOGPROB_ATOL = 2e-4
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


def fresh_logits(target: TargetModel, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return target.model(torch.tensor([tokens])).logits[0, -1].float()


def chain_logits(target: TargetModel, prompt: list[int], drafts: list[int]) -> torch.Tensor:
    """[len(drafts) + 1, vocab]: a fresh cache, the prompt, then the drafts as a plain chain."""
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))
    return target.score(cache, prompt[-1:], chain(drafts))


def random_parents(rng: random.Random, n: int) -> list[int]:
    return [rng.choice([ROOT, *range(i)]) for i in range(n)]


@pytest.fixture(params=["sdpa", "eager"])
def attention(request, target: TargetModel) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """Runs a test under each attention implementation the tree mask must work with."""
    default = target.model.config._attn_implementation
    target.model.set_attn_implementation(request.param)
    yield request.param
    target.model.set_attn_implementation(default)


def test_tree_pass_scores_each_node_like_a_chain_over_its_path(target: TargetModel, tokenizer, attention: str) -> None:  # type: ignore[no-untyped-def]
    """For every node of random trees, the tree pass's target distribution equals the chain
    pass's over that node's path (fp32 on CPU, within LOGPROB_ATOL), with SDPA and eager."""
    assert target.model.config._attn_implementation == attention
    rng = random.Random(3)
    prompt = tokenizer.encode("The quick brown fox jumps over the lazy dog. The quick brown")
    for n in (1, 2, 3, 7, 12):
        parents = random_parents(rng, n)
        tokens = [rng.randrange(target.vocab_size) for _ in range(n)]
        tokens[-1] = tokens[0] if n > 1 and parents[-1] == parents[0] else tokens[-1]  # sometimes repeated siblings
        tree = build_tree(tokens, parents)
        cache = target.new_cache()
        target.score(cache, prompt[:-3], chain([]))
        tree_rows = target.score(cache, prompt[-3:], tree).log_softmax(-1)  # 3 pending tokens, then the tree
        assert len(cache) == len(prompt) + n
        root = chain_logits(target, prompt, [])[0].log_softmax(-1)
        torch.testing.assert_close(tree_rows[0], root, atol=LOGPROB_ATOL, rtol=0)
        for node in range(n):
            path = tree.ancestors[node].nonzero().squeeze(1).tolist()
            expected = chain_logits(target, prompt, [tokens[i] for i in path])[-1].log_softmax(-1)
            torch.testing.assert_close(tree_rows[node + 1], expected, atol=LOGPROB_ATOL, rtol=0, msg=f"tree {parents}, node {node}")


def test_cache_keeps_exactly_the_accepted_path(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """After a tree round, the cache is the committed prefix plus the accepted path, gathered into
    place: the next pass scores like a fresh pass over the committed tokens."""
    prompt = tokenizer.encode("Monday, Tuesday, Wednesday, Thursday,")
    expected = [greedy_step for greedy_step in _greedy_tokens(target, prompt, 4)]
    junk = tokenizer.encode(" banana")[0]
    # The right continuation sits in the second branch, behind a wrong first branch: keep() must
    # gather its cache entries from the middle of the pass.
    tokens = [junk, junk, expected[0], expected[1], junk, expected[2]]
    parents = [ROOT, 0, ROOT, 2, 3, 3]
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 8, 8192))
    verdict = session.verify(RoundInput.point_masses(tokens, parents))
    assert verdict.accepted_nodes == [2, 3, 5] and verdict.is_bonus and verdict.next_token == expected[3]
    assert session.tokens == prompt + expected[:4]
    assert len(session.cache) == len(session.tokens) - 1
    pending = session.tokens[len(session.cache):]
    cached = target.score(session.cache, pending, chain([]))[0]
    torch.testing.assert_close(cached, fresh_logits(target, session.tokens), atol=2e-4, rtol=1e-4)


def _greedy_tokens(target: TargetModel, prompt: list[int], count: int) -> list[int]:
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 8, 8192))
    return [session.verify(RoundInput.point_masses([])).next_token for _ in range(count)]


def test_rolled_back_cache_matches_a_fresh_pass(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 16, 8192))
    junk = tokenizer.encode(" banana banana banana banana")  # drafts the target rejects
    rejected = 0
    for drafts in ([], junk, junk[:1], [], junk):
        verdict = session.verify(RoundInput.point_masses(drafts))
        rejected += len(drafts) - verdict.num_accepted
        assert len(session.cache) == len(session.tokens) - 1
    assert rejected > 0  # the rollback path really ran
    # The next round sees exactly what a fresh forward over the committed tokens sees.
    pending = session.tokens[len(session.cache):]
    cached = target.score(session.cache, pending, chain([]))[0]
    torch.testing.assert_close(cached, fresh_logits(target, session.tokens), atol=2e-4, rtol=1e-4)


def test_accepted_drafts_are_committed_with_the_next_token(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    prompt = tokenizer.encode("1, 2, 3, 4, 5, 6,")
    plain = _greedy_tokens(target, prompt, 4)
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 16, 8192))
    verdict = session.verify(RoundInput.point_masses(plain[:3]))
    assert verdict.accepted_nodes == [0, 1, 2] and verdict.is_bonus and verdict.next_token == plain[3]
    assert session.tokens == prompt + plain


def test_padded_short_pass_scores_like_an_unpadded_one(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A 2- and a 3-token pass padded to 4, as F.linear's layout pads them on CPU (target_model.py)."""
    prompt = tokenizer.encode("Speculative decoding is")
    padded = TargetModel(target.model, "padded")
    padded.backend.weight_first = False
    padded.pass_tokens = [1, 4, 4, 4]
    unpadded = TargetModel(target.model, "unpadded")
    unpadded.backend.weight_first = False
    results = []
    for model in (padded, unpadded):
        cache = model.new_cache()
        model.score(cache, prompt[:-1], chain([]))
        short_chain = model.score(cache, prompt[-1:], chain([11]))  # a 2-token pass
        assert len(cache) == len(prompt) + 1  # the padding left no cache entries behind
        cache.truncate(len(prompt))
        short_tree = model.score(cache, [11], build_tree([42, 7], [ROOT, ROOT]))  # a 3-token tree pass
        assert len(cache) == len(prompt) + 3
        results.append((short_chain, short_tree))
    for with_padding, without in zip(*results):
        torch.testing.assert_close(with_padding, without, atol=2e-4, rtol=1e-4)


def test_a_pass_padded_to_a_tuned_size_scores_like_an_unpadded_one(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Whatever sizes the machine's timing picked, padding changes no real row: a 7-token pass
    padded to 9 and a 5-token tree padded to 8 give the logits of unpadded passes."""
    prompt = tokenizer.encode("Speculative decoding is a way to")
    tuned = TargetModel(target.model, "tuned")
    tuned.pass_tokens = [1, 4, 4, 4, 8, 6, 9, 8, 9]
    unpadded = TargetModel(target.model, "unpadded")
    unpadded.pass_tokens = []
    results = []
    for model in (tuned, unpadded):
        cache = model.new_cache()
        model.score(cache, prompt[:-1], chain([]))
        seven = model.score(cache, prompt[-1:], chain([11, 12, 13, 14, 15, 16]))
        assert len(cache) == len(prompt) + 6  # the padding left no cache entries behind
        cache.truncate(len(prompt))
        tree = model.score(cache, [11], build_tree([42, 7, 8, 9], [ROOT, ROOT, 0, 1]))
        assert len(cache) == len(prompt) + 5
        results.append((seven, tree))
    for padded, plain in zip(*results):
        torch.testing.assert_close(padded, plain, atol=2e-4, rtol=1e-4)


def test_tuning_times_every_size_and_keeps_plain_decoding_unpadded(target: TargetModel) -> None:
    tuned = TargetModel(target.model, "tuned")
    seconds = tuned.tune_pass_sizes(context_tokens=32, max_tokens=6, repeats=1)
    assert len(seconds) == 6 and all(t > 0 for t in seconds)
    assert tuned.pass_tokens[0] == 1 and all(r + 1 <= s <= 6 for r, s in enumerate(tuned.pass_tokens))
    # What each pass now costs, padded as it runs, is what the verifier tells drafters (ModelInfo).
    assert tuned.pass_seconds == [seconds[s - 1] for s in tuned.pass_tokens] and tuned.pass_context_tokens == 32
    # On CPU it timed both linear layouts and kept one; batched passes pad as that layout needs.
    assert tuned.min_pass_tokens == (1 if tuned.backend.weight_first else 4)


def test_session_limits(target: TargetModel) -> None:
    limits = Limits(max_draft_tokens=3, max_draft_depth=2, context_length=8)
    with pytest.raises(InvalidArgument, match="open.prompt_token_ids"):
        Session(target, [1] * 8, SamplingParams(), seed=0, limits=limits)
    session = Session(target, [1] * 5, SamplingParams(), seed=0, limits=limits)
    with pytest.raises(InvalidArgument, match="4 nodes exceed this verifier's limit of 3"):
        session.verify(RoundInput.point_masses([5, 5, 5, 5], [ROOT] * 4))
    with pytest.raises(InvalidArgument, match="depth 3, beyond this verifier's limit of 2"):
        session.verify(RoundInput.point_masses([5, 5, 5]))
    session.verify(RoundInput.point_masses([5]))  # 5 committed tokens + 1 drafted + 1 = 7 <= 8
    with pytest.raises(InvalidArgument, match="context length"):
        session.verify(RoundInput.point_masses([5, 5, 5], [ROOT, 0, ROOT]))  # 7 + depth 2 + 1 > 8
    session.closed = True
    with pytest.raises(FailedPrecondition):
        session.verify(RoundInput.point_masses([]))


MALFORMED = [
    # (tokens, parents, field named, message part)
    ([5, 6], [ROOT, 5], "round.nodes[1].parent", "out of range"),
    ([5, 6], [ROOT, -2], "round.nodes[1].parent", "out of range"),
    ([5, 6], [1, ROOT], "round.nodes[0].parent", "parents must come before their children"),
    ([5, 6], [ROOT, 1], "round.nodes[1].parent", "its own parent"),
    ([5, 6, 7], [2, 0, 1], "round.nodes[0].parent", "must come before"),  # a cycle 0 -> 2 -> 1 -> 0
    ([5, 60000], [ROOT, 0], "round.nodes.token_id", "outside the vocabulary"),
]


@pytest.mark.parametrize(("tokens", "parents", "field", "message"), MALFORMED)
def test_malformed_trees_are_refused_and_harm_nothing(  # type: ignore[no-untyped-def]
    target: TargetModel, tokenizer, tokens: list[int], parents: list[int], field: str, message: str
) -> None:
    prompt = tokenizer.encode("One, two, three,")
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(8, 4, 8192))
    with pytest.raises(InvalidArgument, match=message) as error:
        session.verify(RoundInput.point_masses(tokens, parents))
    assert error.value.field == field
    # Nothing was committed or cached: the session goes on as if the round had not been sent.
    assert session.tokens == prompt and len(session.cache) == 0
    assert session.verify(RoundInput.point_masses([])).next_token == _greedy_tokens(target, prompt, 1)[0]


def test_a_cut_prepared_round_is_the_prepared_prefix(target: TargetModel) -> None:
    from verifier_svc.round_pass import prune

    session = Session(target, [1, 2, 3], SamplingParams(0.7), seed=0, limits=Limits(16, 8, 8192))
    round_ = RoundInput([5, 6, 7, 8], [ROOT, 0, ROOT, 1], [[5, 9], [6], [7], [8, 3]], [[0.5, 0.5], [1.0], [1.0], [0.25, 0.75]])
    cut, fresh = session.prepare(round_).cut(prune(round_, 2)), session.prepare(prune(round_, 2))
    assert cut.round == fresh.round and (cut.start, cut.pending) == (fresh.start, fresh.pending)
    assert cut.tree.tokens.tolist() == fresh.tree.tokens.tolist() and cut.tree.parents.tolist() == fresh.tree.parents.tolist()
    width = fresh.q_ids.shape[1]  # the cut keeps the full round's padding width (padding: probability 0)
    assert torch.equal(cut.q_ids[:, :width], fresh.q_ids) and torch.equal(cut.q_probs[:, :width], fresh.q_probs)
    assert not cut.q_probs[:, width:].any()


@pytest.mark.parametrize(
    "sampling,acceptance,output,argmax_only",
    [
        (GREEDY, AcceptanceParams(), OutputOptions(), True),
        (SamplingParams(0.7), AcceptanceParams(), OutputOptions(), False),
        (GREEDY, AcceptanceParams("lenient", 0.5), OutputOptions(), False),
        (GREEDY, AcceptanceParams(), OutputOptions(logprobs=True), False),
        (GREEDY, AcceptanceParams(), OutputOptions(penalties=Penalties(repetition_penalty=1.2)), False),
    ],
)
def test_only_rounds_that_read_nothing_but_the_argmax_let_a_pass_leave_tokens_out(  # type: ignore[no-untyped-def]
    target: TargetModel, sampling: SamplingParams, acceptance: AcceptanceParams, output: OutputOptions, argmax_only: bool
) -> None:
    """Greedy exact rounds without logprobs, penalties or a constraint read only each row's
    argmax (TargetModel.score's argmax_only); every other session needs the whole rows."""
    session = Session(target, [1, 2, 3], sampling, seed=0, limits=Limits(16, 8, 8192), acceptance=acceptance, output=output)
    assert session.argmax_only is argmax_only


def test_a_session_that_asks_gives_its_prompts_entries_after_the_first_round_once(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The first round's pass covers the prompt and a tree; what the session gives the drafter is
    the prompt's entries alone, as transformers computes them (in float16), and only once."""
    prompt = tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    session = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 8, 8192), return_prompt_cache=True)
    assert session.prompt_cache_tokens == len(prompt)
    session.verify(RoundInput.point_masses([5, 6, 7], [ROOT, 0, ROOT]))
    sent = session.take_prompt_entries()
    assert sent is not None and sent.tokens == len(prompt) and sent.dtype == "float16"
    with torch.inference_mode():
        reference = target.model(torch.tensor([prompt]), use_cache=True).past_key_values
    assert len(sent.keys) == len(reference.layers) == len(sent.values)
    for layer, key_bytes, value_bytes in zip(reference.layers, sent.keys, sent.values):
        for want, data in ((layer.keys, key_bytes), (layer.values, value_bytes)):
            got = torch.frombuffer(bytearray(data), dtype=torch.float16).view(sent.heads, len(prompt), sent.head_dim).float()
            torch.testing.assert_close(got, want[0].float(), atol=2e-3, rtol=2e-3)  # float16's rounding, and a pass of another shape
    assert session.prompt_cache_tokens == 0 and session.take_prompt_entries() is None
    plain = Session(target, prompt, GREEDY, seed=0, limits=Limits(16, 8, 8192))
    plain.verify(RoundInput.point_masses([], []))
    assert plain.prompt_cache_tokens == 0 and plain.take_prompt_entries() is None

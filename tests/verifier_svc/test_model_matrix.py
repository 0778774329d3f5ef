"""Every architecture of tests/model_matrix.py, in-process on TargetModel and score_batch as the
verifier loads them (verifier_svc.model_loader): (a) a tree pass gives each node the logits of
its path scored as a plain sequence by transformers' eager forward; (b) a batched pass gives the
logits of lone passes, for sessions of different cache lengths with trees, over two rounds (so
the caches it appended are checked too); (d) seeded temperature-1 sessions commit the same tokens
batched and alone. Sequences are longer than the matrix's windows, so a window left out, or
applied where it does not belong, moves logits by whole units."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from specdec.sampling_params import SamplingParams
from tests.model_matrix import ARCHITECTURES, VOCAB, WINDOW, markdown, path_tokens, plain_logits
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.kv_cache import KVCache
from verifier_svc.model_loader import load_model
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, TokenTree, build_tree, chain

# fp32: passes differ from the reference only in summation order (logits of std ~3);
# a wrong mask, window, position or post-head step moves them by far more.
LOGIT_ATOL = 1e-3
DOCS = Path(__file__).resolve().parents[2] / "docs" / "supported-models.md"


def random_tree(rng: random.Random, nodes: int) -> TokenTree:
    parents = [rng.choice([ROOT, *range(i)]) if i else ROOT for i in range(nodes)]
    return build_tree([rng.randrange(3, VOCAB) for _ in range(nodes)], parents)


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def models(request, matrix_model_folder) -> tuple[TargetModel, PreTrainedModel]:  # type: ignore[no-untyped-def]
    """(the target as the verifier loads it, the eager reference) for one architecture."""
    folder = matrix_model_folder(request.param)
    target = TargetModel(load_model(folder, "cpu", torch.float32), request.param)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    return target, reference


def score_rounds(
    target: TargetModel, reference: PreTrainedModel, rng: random.Random, cache: KVCache, committed: list[int],
    pending: list[int], node_counts: Sequence[int],
) -> None:
    """Rounds of random trees of node_counts nodes on `cache` (holding `committed`, `pending` not
    yet cached): each node's logits must be its path's scored as a plain sequence; the deepest
    path is kept, as acceptance would, and the next round goes on from it."""
    for nodes in node_counts:
        tree = random_tree(rng, nodes)
        logits = target.score(cache, pending, tree)
        context = committed + pending
        expected = [plain_logits(reference, context)] + [plain_logits(reference, context + path_tokens(tree, i)) for i in range(nodes)]
        worst = (logits - torch.stack(expected)).abs().max().item()
        assert worst < LOGIT_ATOL, f"{target.name}: tree logits differ from plain sequences by {worst:.3g}"
        assert len(cache) == len(context) + nodes
        kept = tree.ancestors[int(tree.depths.argmax())].nonzero().flatten().tolist() if nodes else []
        cache.keep(len(context), kept)
        committed, pending = context + [int(tree.tokens[i]) for i in kept], [rng.randrange(3, VOCAB)]


def prefilled(target: TargetModel, tokens: list[int]) -> KVCache:
    cache = target.new_cache()
    target.score(cache, tokens, chain([]))
    return cache


def test_tree_pass_scores_each_path_as_a_plain_sequence(models) -> None:  # type: ignore[no-untyped-def]
    """(a) Two rounds of random trees after a cached prompt longer than the window."""
    target, reference = models
    rng = random.Random(1)
    prompt = [rng.randrange(3, VOCAB) for _ in range(WINDOW + 9)]
    cache = prefilled(target, prompt[:-3])
    score_rounds(target, reference, rng, cache, prompt[:-3], prompt[-3:], (9, 6))


def test_batched_pass_gives_the_logits_of_lone_passes(models) -> None:  # type: ignore[no-untyped-def]
    """(b) Sessions cached to 3, 20 and 31 tokens plus one still to prefill, two rounds with trees."""
    target, _ = models
    rng = random.Random(2)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 20, 31, 24)]
    lone = [prefilled(target, p) if i < 3 else target.new_cache() for i, p in enumerate(prompts)]
    batched = [prefilled(target, p) if i < 3 else target.new_cache() for i, p in enumerate(prompts)]
    pendings = [[rng.randrange(3, VOCAB)] for _ in range(3)] + [prompts[3]]
    for _ in range(2):
        trees = [random_tree(rng, n) for n in (0, 5, 9, 3)]
        alone = [target.score(c, p, t) for c, p, t in zip(lone, pendings, trees)]
        together = score_batch(target, [PassInput(c, p, t) for c, p, t in zip(batched, pendings, trees)])
        for a, b in zip(alone, together):
            assert a.shape == b.shape
            worst = (a - b).abs().max().item()
            assert worst < LOGIT_ATOL, f"{target.name}: batched logits differ from lone ones by {worst:.3g}"
        for cache_a, cache_b, p, t in zip(lone, batched, pendings, trees):
            assert len(cache_a) == len(cache_b)
            start = len(cache_a) - len(p) - len(t)
            keep = t.ancestors[len(t) - 1].nonzero().flatten().tolist() if len(t) else []
            cache_a.keep(start + len(p), keep)
            cache_b.keep(start + len(p), keep)
        pendings = [[rng.randrange(3, VOCAB)] for _ in pendings]


def test_seeded_sampling_is_the_same_batched_and_alone(models, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """(d) Three seeded temperature-1 sessions, trees drafted every round, joined at different rounds."""
    target, _ = models
    limits = Limits(max_draft_tokens=16, max_draft_depth=8, context_length=target.context_length)
    prompts = ["The quick brown fox jumps over the lazy dog again and again", "One, two, three", "def add(a, b):\n    return a + b\n\n"]

    def run(batched: bool) -> list[list[int]]:
        group = [Session(target, tokenizer.encode(p), SamplingParams(temperature=1.0), seed, limits) for seed, p in enumerate(prompts)]
        rngs = [random.Random(10 + k) for k in range(len(group))]
        rounds = 5
        for step in range(rounds + len(group) - 1):
            active = [k for k in range(len(group)) if k <= step < k + rounds]
            drafts = {}
            for k in active:
                tree = random_tree(rngs[k], rngs[k].choice([0, 2, 4]))
                drafts[k] = RoundInput.point_masses(tree.tokens.tolist(), tree.parents.tolist())
            prepared = {k: group[k].prepare(drafts[k]) for k in active}
            if batched:
                scored = score_batch(target, [PassInput(group[k].cache, prepared[k].pending, prepared[k].tree) for k in active])
            else:
                scored = [target.score(group[k].cache, prepared[k].pending, prepared[k].tree) for k in active]
            for k, logits in zip(active, scored):
                group[k].finish(prepared[k], logits)
        return [s.tokens for s in group]

    assert run(batched=True) == run(batched=False)


def test_supported_models_page_is_current() -> None:
    assert DOCS.read_text() == markdown(), "regenerate: python -m tests.model_matrix --markdown > docs/supported-models.md"

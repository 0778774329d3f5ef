"""Batched verification against the real model, in-process (fp32 on CPU): rounds of several
sessions scored in one packed pass give the same tokens, for the same seeds, as each session's
own unbatched rounds, with sessions of different lengths, trees and sampling settings, joining
at different rounds (so one's first pass over its whole prompt shares a batch with others'
short rounds)."""

from __future__ import annotations

import random

import pytest
import torch

from specdec.sampling_params import SamplingParams
from verifier_svc.batched_pass import PassInput, batch_mask_and_positions, packed_rows, score_batch
from verifier_svc.linear_layout import drop_onednn_copies, onednn_copies
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain, tree_attention_mask, tree_position_ids

# fp32: the batched pass differs from a single session's only in matrix shapes (summation
# order) and masked padding (the test prints the largest difference it saw); 1e-3 leaves room
# across BLAS builds while still catching any wrong mask or position (those move logits by
# whole units).
LOGIT_ATOL = 1e-3
LIMITS = Limits(max_draft_tokens=16, max_draft_depth=8, context_length=2048)
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return",
    "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four,",
    "Write a short poem about the sea. The sea, the sea, the endless sea; the sea",
]
SETTINGS = [
    (SamplingParams(temperature=0.0), 0),
    (SamplingParams(temperature=0.8), 11),
    (SamplingParams(temperature=1.0, top_p=0.9), 12),
    (SamplingParams(temperature=0.7, top_k=20), 13),
]
ROUNDS = 4


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


def drafted_round(rng: random.Random, session: Session) -> RoundInput:
    """A tree of copies: continuations of earlier occurrences of the last token (so some are
    accepted), plus a random branch; sometimes empty."""
    n = rng.choice([0, 1, 3, 5, 8])
    tokens, parents = [], []
    history = session.tokens
    for i in range(n):
        parent = rng.choice([ROOT, *range(i)]) if i else ROOT
        where = rng.randrange(len(history))
        tokens.append(history[where])
        parents.append(parent)
    return RoundInput.point_masses(tokens, parents)


def sessions(target: TargetModel, tokenizer) -> list[Session]:  # type: ignore[no-untyped-def]
    return [Session(target, tokenizer.encode(p), s, seed, LIMITS) for p, (s, seed) in zip(PROMPTS, SETTINGS)]




def run(target: TargetModel, tokenizer, batched: bool) -> tuple[list[list[int]], list[list[torch.Tensor]]]:  # type: ignore[no-untyped-def]
    """Session k joins at round k. Returns each session's tokens and per-round logits."""
    group = sessions(target, tokenizer)
    rngs = [random.Random(100 + k) for k in range(len(group))]
    logits: list[list[torch.Tensor]] = [[] for _ in group]
    for step in range(ROUNDS + len(group) - 1):
        active = [k for k in range(len(group)) if k <= step < k + ROUNDS]
        prepared = {k: group[k].prepare(drafted_round(rngs[k], group[k])) for k in active}
        if batched:
            inputs = [PassInput(group[k].cache, prepared[k].pending, prepared[k].tree) for k in active]
            scored = dict(zip(active, score_batch(target, inputs)))
        else:
            scored = {k: target.score(group[k].cache, prepared[k].pending, prepared[k].tree) for k in active}
        for k in active:
            logits[k].append(scored[k])
            group[k].finish(prepared[k], scored[k])
    return [s.tokens for s in group], logits


@pytest.fixture
def onednn_from(request, target: TargetModel):  # type: ignore[no-untyped-def]
    """Rows from which the target's products read oneDNN weight copies (0: none made)."""
    rows = request.param
    if rows and not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    if rows:
        assert onednn_copies(target.model) > 0
    target.backend.onednn_min_rows = rows
    yield rows
    target.backend.onednn_min_rows = 0
    drop_onednn_copies(target.model)


@pytest.mark.parametrize(("weight_first", "min_rows", "onednn_from"), [(True, 1, 0), (False, 1, 0), (False, 9, 0), (True, 1, 2)],
                         ids=["weight-first", "F.linear-unpadded", "F.linear-padded-to-9", "onednn-from-2-rows"], indirect=["onednn_from"])
def test_batched_rounds_give_the_tokens_of_unbatched_rounds(target: TargetModel, tokenizer, weight_first: bool, min_rows: int, onednn_from: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Greedy and sampled sessions (same seeds) commit identical tokens batched or not, and
    every round's logits agree within LOGIT_ATOL; the caches stay consistent across rounds. In
    either linear layout the CPU backend may choose for batched passes (cpu_tuning), F.linear
    unpadded or with padding rows after the sessions' packed rows, and with the batched passes'
    products from oneDNN weight copies (the unbatched rounds without them)."""
    monkeypatch.setattr(target.backend, "weight_first", weight_first)
    monkeypatch.setattr(target.backend, "linear_min_rows", min_rows)
    assert target.min_pass_tokens == min_rows
    target.backend.onednn_min_rows = 0
    alone_tokens, alone_logits = run(target, tokenizer, batched=False)
    target.backend.onednn_min_rows = onednn_from
    batch_tokens, batch_logits = run(target, tokenizer, batched=True)
    assert batch_tokens == alone_tokens
    worst = max((a - b).abs().max().item() for xs, ys in zip(alone_logits, batch_logits) for a, b in zip(xs, ys))
    print(f"batched vs unbatched logits: max |difference| {worst:.2e}")
    assert worst < LOGIT_ATOL
    # the run did accept drafts somewhere (else the trees were not exercised)
    prompt_lengths = [len(tokenizer.encode(p)) for p in PROMPTS]
    assert sum(len(t) - n for t, n in zip(batch_tokens, prompt_lengths)) > len(PROMPTS) * ROUNDS


def test_batched_cache_matches_a_fresh_pass(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """After batched rounds, each session's cache gives the same next-token logits as a fresh
    forward pass over its committed tokens."""
    group = sessions(target, tokenizer)[:3]
    rng = random.Random(7)
    for _ in range(3):
        prepared = [s.prepare(drafted_round(rng, s)) for s in group]
        scored = score_batch(target, [PassInput(s.cache, p.pending, p.tree) for s, p in zip(group, prepared)])
        for s, p, lg in zip(group, prepared, scored):
            s.finish(p, lg)
    for s in group:
        assert len(s.cache) == len(s.tokens) - 1
        cached = target.score(s.cache, s.tokens[-1:], chain([]))[0]
        with torch.inference_mode():
            fresh = target.model(torch.tensor([s.tokens])).logits[0, -1].float()
        assert torch.allclose(cached, fresh, atol=LOGIT_ATOL)


def test_mask_rows_are_each_sessions_own_tree_mask() -> None:
    """Pure layout check: sessions' rows packed one after another, then padding; each real row
    carries its session's own tree mask over the slots of its own cache after the pass (cached,
    then new); columns past them are hidden; query and key positions are the tree's."""

    class FakeCache:
        def __init__(self, n: int) -> None:
            self.n = n

        def __len__(self) -> int:
            return self.n

    a = PassInput(FakeCache(5), [9], build_tree([1, 2, 3], [ROOT, 0, ROOT]))  # type: ignore[arg-type]
    b = PassInput(FakeCache(2), [7, 8], chain([4]))  # type: ignore[arg-type]
    offsets, rows = packed_rows([a, b], min_rows=9)
    assert offsets == [0, 4] and rows == 9  # 4 + 3 real rows, padded to 9
    assert packed_rows([a, b]) == ([0, 4], 7)
    mask, positions, keys = batch_mask_and_positions([a, b], offsets, rows)
    assert mask.shape == (9, 9) and positions.shape == (9,) and keys.shape == (9, 9)  # W = 5 + 4
    assert torch.equal(mask[:4], tree_attention_mask(a.tree, 5, 1))  # a fills its columns
    own_b = tree_attention_mask(b.tree, 2, 2)  # [3, 5]
    assert torch.equal(mask[4:7, :5], own_b) and not mask[4:7, 5:].any()
    assert all(mask[r].nonzero().flatten().tolist() == [0] for r in (7, 8))  # padding (never computed) sees one column
    assert positions[:4].tolist() == tree_position_ids(a.tree, 5, 1).tolist()
    assert positions[4:7].tolist() == tree_position_ids(b.tree, 2, 2).tolist()
    assert positions[7:].tolist() == [0, 0]
    for r in range(4):  # a cached entry's slot is its position, then the new tokens'
        assert keys[r].tolist() == [0, 1, 2, 3, 4, *positions[:4].tolist()]
    for r in range(4, 7):
        assert keys[r, :5].tolist() == [0, 1, *positions[4:7].tolist()]

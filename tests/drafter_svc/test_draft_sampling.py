"""The drafter's q: the target's standardization (same as verifier_svc.sampling), a minimal tail
cut, float32 on the wire, and samples drawn from exactly the q that is sent."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drafter_svc.draft_sampling import TAIL_MASS, draft_distribution, standardize, top_tokens
from specdec.sampling_params import SamplingParams
from tests.verifier_svc.test_acceptance import l1_bound
from verifier_svc.sampling import standardize as target_standardize

PARAMS = [
    SamplingParams(1.0), SamplingParams(0.8, 50), SamplingParams(0.7, 0, 0.9), SamplingParams(1.3, 20, 0.8),
    SamplingParams(0.5, 1), SamplingParams(1.0, 0, 0.05),
]


def logits(seed: int, vocab: int = 2000, scale: float = 4.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(vocab) * scale).astype(np.float32)


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_standardize_matches_the_targets(params: SamplingParams) -> None:
    for seed in range(5):
        x = logits(seed)
        x[:30] = x[0]  # ties at the top: top-k keeps them all, as transformers does
        ours = standardize(x, params)
        theirs = target_standardize(torch.from_numpy(x)[None], params)[0].double().numpy()
        assert np.array_equal(ours > 0, theirs > 0)
        assert np.abs(ours - theirs).max() < 1e-6


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_q_is_the_smallest_head_holding_all_but_the_tail(params: SamplingParams) -> None:
    x = logits(7)
    p = standardize(x, params)
    q = draft_distribution(x, params)
    kept = p[q.token_ids]
    assert q.probs.dtype == np.float32 and q.token_ids.dtype == np.int64
    assert len(set(q.token_ids.tolist())) == len(q.token_ids) and (q.probs > 0).all()
    assert kept.sum() >= 1 - TAIL_MASS - 1e-12
    assert kept.sum() - kept.min() < 1 - TAIL_MASS  # minimal: without its lightest token it falls short
    assert np.all(np.diff(kept) <= 0)  # most likely first
    assert np.abs(q.probs - kept / kept.sum()).max() < 1e-6
    assert abs(q.probs.sum(dtype=np.float64) - 1) < 1e-5


@pytest.mark.parametrize("spread", ["peaked", "flat", "tied", "uniform", "long tail"])
def test_a_large_vocabulary_gives_the_q_of_a_full_stable_sort(spread: str) -> None:
    """The sort of the tokens above a probability floor (fast) and its fallback to the whole
    vocabulary (every token above the floor; or those above it holding too little, a long tail
    of unlikely tokens) keep exactly the tokens, in the order, that sorting all 49,152
    probabilities would, ties included."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(49152) * 3).astype(np.float32)
    if spread == "peaked":
        x += 12 * (rng.random(49152) < 0.002)
    if spread == "tied":
        x[:6000] = 9.0  # thousands of equal tokens at the top
    if spread == "uniform":
        x = (rng.standard_normal(49152) * 0.01).astype(np.float32)
    if spread == "long tail":  # one token of ~0.97, the rest ~6e-7 each: below the floor, 0.03 together
        x = np.zeros(49152, np.float32)
        x[5] = 14.3
    params = SamplingParams(1.0)
    p = standardize(x, params)
    order = np.argsort(-p, kind="stable")
    keep = min(int(np.searchsorted(np.cumsum(p[order]), 1 - TAIL_MASS, side="left")) + 1, int(np.count_nonzero(p)))
    q = draft_distribution(x, params)
    assert np.array_equal(q.token_ids, order[:keep])
    assert np.array_equal(q.probs, (p[order[:keep]] / p[order[:keep]].sum()).astype(np.float32))


def test_greedy_is_a_point_mass_at_the_argmax_lowest_id_on_ties() -> None:
    x = logits(2)
    x[[10, 20]] = x.max() + 1
    q = draft_distribution(x, SamplingParams(0.0))
    assert q.lists() == ([10], [1.0])
    assert top_tokens(x, 3) == [10, 20, int(np.argsort(-logits(2), kind="stable")[0])]


def test_samples_follow_the_q_that_is_sent() -> None:
    """200,000 seeded draws from a sparse q: the empirical distribution is within the
    Bretagnolle-Huber-Carol L1 bound of q's own float32 probabilities."""
    q = draft_distribution(logits(5, vocab=300, scale=1.5), SamplingParams(0.9, 12))
    rng = np.random.default_rng(0)
    draws = np.array([q.sample(rng) for _ in range(200_000)])
    index = {t: i for i, t in enumerate(q.token_ids.tolist())}
    assert set(np.unique(draws).tolist()) <= set(index)
    counts = np.bincount([index[t] for t in draws.tolist()], minlength=len(index)) / len(draws)
    distance = np.abs(counts - q.probs).sum()
    eps = l1_bound(len(index), len(draws))
    print(f"L1(empirical, q) = {distance:.4f} < bound {eps:.4f}")
    assert distance < eps

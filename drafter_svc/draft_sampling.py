"""The distribution q a model drafter samples from, sent sparsely, and sampling from exactly it
(numpy, torch-free).

q is the draft model's logits standardized as the target standardizes its own
(verifier_svc/sampling.py, after transformers' logits warpers: temperature, then top-k keeping
ties, then top-p, then softmax; Leviathan et al., section 2.3), then cut to the smallest set of
most likely tokens holding at least 1 - tail_mass of it and renormalized, then rounded to
float32, the wire's type. The draft token is sampled from that float32 q and nothing else, so
the q the verifier receives is exactly the distribution its token was drawn from (what
transformers issues 32867 and 47932 got wrong: q taken from raw logits, tokens from processed
ones). Top-k/top-p already make q sparse; without truncation the cut bounds the message to the
tokens that carry all but tail_mass of the mass. Greedy (temperature 0): the argmax as a point
mass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdec.sampling_params import SamplingParams

# Mass of the least likely tokens left out of q (before renormalizing); alpha drops by at most
# this much. Measured for the int8 SmolLM2 drafter at temperature 1 over the bench prompts
# (bench/results/drafter_quality-20261122-154441.md): tail 1e-4 sends 50.8 KB per drafted token
# (~6,000 tokens) at alpha 0.9717, 1e-3 18.3 KB at 0.9713, 1e-2 4.3 KB at 0.9675: 12x fewer bytes
# than 1e-4 (and the verifier's parsing with them) for 0.004 of alpha.
TAIL_MASS = 1e-2
FLOOR = 1e-6  # tokens at least this likely are sorted first; the whole vocabulary only when they are not enough


@dataclass(frozen=True)
class SparseQ:
    """A distribution over token_ids (distinct, most likely first) with float32 probs > 0 that
    sum to 1 up to float32 rounding; sampling uses these very numbers."""

    token_ids: np.ndarray  # [S] int64
    probs: np.ndarray  # [S] float32

    def sample(self, rng: np.random.Generator) -> int:
        """One token drawn from probs (renormalized in float64 against their float32 rounding)."""
        cdf = np.cumsum(self.probs, dtype=np.float64)
        index = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return int(self.token_ids[min(index, len(cdf) - 1)])

    def lists(self) -> tuple[list[int], list[float]]:
        """(token ids, probabilities) as a Draft node carries them."""
        return self.token_ids.tolist(), self.probs.tolist()


def point_mass(token: int) -> SparseQ:
    return SparseQ(np.array([token], np.int64), np.array([1.0], np.float32))


def standardize(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logits [vocab] -> probs [vocab] float64, as verifier_svc.sampling.standardize (temperature
    > 0): top-k keeps every token >= the k-th largest score; top-p drops the sorted tokens whose
    cumulative mass (ascending) is <= 1 - top_p, always keeping the most likely."""
    if not params.temperature > 0:
        raise ValueError(f"standardize needs temperature > 0, got {params.temperature}")
    scores = logits.astype(np.float32) / np.float32(params.temperature)  # float32, as the target
    vocab = scores.shape[-1]
    if params.top_k > 0:
        kth = np.partition(scores, vocab - min(params.top_k, vocab))[vocab - min(params.top_k, vocab)]
        scores = np.where(scores < kth, -np.inf, scores)
    if params.top_p < 1.0:
        order = np.argsort(scores, kind="stable")  # ascending
        cum = np.cumsum(_softmax(scores[order]))
        remove = cum <= 1 - params.top_p
        remove[-1] = False
        scores = scores.copy()
        scores[order[remove]] = -np.inf
    return _softmax(scores)


def draft_distribution(logits: np.ndarray, params: SamplingParams, tail_mass: float = TAIL_MASS) -> SparseQ:
    """The q a draft token is sampled from, given the draft model's logits [vocab] after its path."""
    if params.greedy:
        return point_mass(int(np.argmax(logits)))  # ties: the lowest id, as torch.argmax
    probs = standardize(logits, params)
    order = _most_likely_first(probs, 1.0 - tail_mass)
    cum = np.cumsum(probs[order])
    keep = int(np.searchsorted(cum, 1.0 - tail_mass, side="left")) + 1  # smallest prefix with mass >= 1 - tail
    keep = min(keep, int(np.count_nonzero(probs)))
    ids = order[:keep]
    # Every kept probability is >= tail_mass / vocab > 0 (the kept prefix stops once the rest
    # holds less than tail_mass), so none rounds to 0 in float32.
    return SparseQ(ids.astype(np.int64), (probs[ids] / probs[ids].sum()).astype(np.float32))


def _most_likely_first(probs: np.ndarray, mass: float, floor: float = FLOOR) -> np.ndarray:
    """Token ids by decreasing probability, ties by increasing id (a stable sort of -probs), at
    least as far as they hold `mass`: the tokens at least `floor` likely, sorted, when they hold
    it (every token left out is less likely than every one kept, so none could rank before one),
    else the whole vocabulary sorted. A full sort of 49,152 probabilities costs ~4 ms, a quarter
    of a drafting step on this CPU. With the floor, `draft_distribution` at temperature 1 took
    0.38 ms a call over 120 of the int8 drafter's logits on Spec-Bench prompts, against 1.52 ms
    with the partial sort of the top 4,096 (argpartition) that it replaced, for the same q."""
    top = np.flatnonzero(probs >= floor)
    if 0 < top.size < probs.shape[0]:
        top = top[np.lexsort((top, -probs[top]))]
        if np.cumsum(probs[top])[-1] >= mass:  # the caller's cumsum over these reaches it too
            return top
    return np.argsort(-probs, kind="stable")


def top_tokens(logits: np.ndarray, count: int) -> list[int]:
    """The `count` highest-scoring token ids, best first (greedy sibling candidates)."""
    count = min(count, logits.shape[-1])
    best = np.argpartition(-logits, count - 1)[:count]
    return [int(t) for t in best[np.lexsort((best, -logits[best]))]]


def model_probabilities(logits: np.ndarray, tokens: Sequence[int]) -> list[float]:
    """The draft model's own probability of each of `tokens`, softmax(logits) at temperature 1: a
    greedy draft's q is a point mass, but how sure the model was is the evidence SpecDec++'s
    acceptance predictor reads (Huang et al., 2024, section 3)."""
    probs = _softmax(logits)
    return [float(probs[t]) for t in tokens]


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores.astype(np.float64) - np.max(scores))
    return shifted / shifted.sum()

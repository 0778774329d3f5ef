"""Sampling whose randomness depends only on a seed and a position: the exponential race.

For a distribution p over the vocabulary and independent E_v ~ Exp(1), one per token,
argmax_v p(v) / E_v is distributed exactly as p (the Gumbel-max trick: -log E_v is a standard
Gumbel, and argmax_v log p(v) + G_v ~ p). Here the E_v of a position are a pure function of
(seed, position): Philox keyed by the pair, a counter-based generator whose streams for distinct
keys are independent. So the token a seeded session emits at a position depends on the seed, the
position and the target's p there, and on nothing else.

Speculative decoding with it (after "Coupling without communication and drafter-invariant
speculative decoding", Daliri, Musco and Suresh, 2024): the verifier emits, at each position,
the race winner of the target's p; a drafted token is accepted iff it is that winner (so the
walk down a tree is the greedy walk of Stratos' Appendix A with the winners in place of the
argmax). The output is then exactly the target's distribution, as speculative sampling's, and
moreover the same sample for a given seed whatever was drafted: any drafter, any tree, any
draft length, and plain decoding, give the same tokens (up to the rounding differences between
target passes of different shapes, as for greedy). A drafter that knows the seed draws its own
tokens as the race winners of its q with the same E_v, which agree with the target's winner
with probability at least (1 - TV(p, q)) / (1 + TV(p, q)) (against 1 - TV for speculative
sampling's coupling); a deterministic drafter (q a point mass) loses nothing: its token is
accepted with probability p(x) either way.

Pure numpy: no I/O, no model, no torch (the drafter is torch-free).
"""

from __future__ import annotations

import numpy as np

from specdec.acceptance_params import AcceptanceParams
from specdec.sampling_params import SamplingParams

_SEED_MASK = (1 << 64) - 1


def race_seed(seed: int | None, sampling: SamplingParams, acceptance: AcceptanceParams) -> int | None:
    """The seed a session's race runs on, or None where it samples otherwise: a seeded session
    at temperature > 0 under the exact rule races. The drafter and the verifier both ask this, so
    that a drafter joins the race exactly when the verifier runs it."""
    return seed if seed is not None and not sampling.greedy and acceptance.rule == "exact" else None


def exponentials(seed: int, position: int, vocab_size: int) -> np.ndarray:
    """[vocab_size] float64: the E_v ~ Exp(1) of token v at `position` (the token's index in the
    session's prompt + output) under `seed`; the same arguments always give the same numbers."""
    if position < 0:
        raise ValueError(f"position must be >= 0, got {position}")
    generator = np.random.Generator(np.random.Philox(key=np.array([seed & _SEED_MASK, position], dtype=np.uint64)))
    return generator.standard_exponential(vocab_size)


def race_winner(probs: np.ndarray, exps: np.ndarray) -> int:
    """argmax_v probs[v] / exps[v]: a token drawn from probs [vocab] (normalized or not) when exps
    are independent Exp(1). Tokens of probability 0 never win unless every token has it."""
    return int(np.argmax(probs / exps))


def race_ranking(token_ids: np.ndarray, probs: np.ndarray, exps: np.ndarray, count: int) -> list[int]:
    """The `count` (at most len(token_ids)) tokens of a sparse distribution (token_ids [S]
    distinct, probs [S] > 0) that rank first in the race against exps [vocab], winner first:
    a drafter's coupled draft token and, after it, its most likely rivals for siblings."""
    scores = probs / exps[token_ids]
    order = np.argsort(-scores, kind="stable")[:count]
    return [int(token_ids[i]) for i in order]


class RaceNoise:
    """One session's exponentials by position, computed once while the session may still sample
    that position: `rows` keeps what it made, `forget_before` drops positions the output has
    passed (a round samples the positions from its first one on, some again after a rejection)."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        self.seed = seed
        self.vocab_size = vocab_size
        self._rows: dict[int, np.ndarray] = {}

    def rows(self, positions: list[int]) -> np.ndarray:
        """[len(positions), vocab_size] float64: exponentials(seed, position, vocab_size) each."""
        for at in positions:
            if at not in self._rows:
                self._rows[at] = exponentials(self.seed, at, self.vocab_size)
        return np.stack([self._rows[at] for at in positions])

    def forget_before(self, position: int) -> None:
        self._rows = {at: row for at, row in self._rows.items() if at >= position}

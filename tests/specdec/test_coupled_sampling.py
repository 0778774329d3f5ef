"""The exponential race: its noise is a pure function of (seed, position), and its winner is a
sample from the distribution it races (chi-square over many positions, with the power to reject
a nearby wrong distribution)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specdec.acceptance_params import AcceptanceParams
from specdec.coupled_sampling import RaceNoise, exponentials, race_ranking, race_seed, race_winner
from specdec.sampling_params import SamplingParams

ALPHA = 1e-4


def chi_square_p(counts: Counter, p: np.ndarray, samples: int) -> float:
    """Pearson's goodness of fit over the tokens of positive probability (all have counts >= 5)."""
    support = np.flatnonzero(p)
    observed = np.array([counts[v] for v in support], dtype=float)
    return float(scipy_stats.chisquare(observed, p[support] * samples).pvalue)


def test_the_noise_is_a_function_of_seed_and_position_only() -> None:
    first = exponentials(7, 12, 1000)
    assert np.array_equal(first, exponentials(7, 12, 1000))
    assert not np.array_equal(first, exponentials(7, 13, 1000))
    assert not np.array_equal(first, exponentials(8, 12, 1000))
    # A drafter whose vocabulary is shorter sees the same numbers for the ids it has.
    assert np.array_equal(exponentials(7, 12, 300), first[:300])
    assert np.array_equal(exponentials(2**64 - 1, 0, 10), exponentials(-1, 0, 10))  # uint64 seeds
    assert abs(float(exponentials(3, 0, 200_000).mean()) - 1.0) < 0.01  # Exp(1)
    with pytest.raises(ValueError, match="position"):
        exponentials(1, -1, 10)


def test_the_race_winner_follows_the_distribution_raced() -> None:
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0])
    samples = 20_000
    counts = Counter(race_winner(p, exponentials(11, position, len(p))) for position in range(samples))
    assert counts[5] == 0  # probability 0 never wins
    assert chi_square_p(counts, p, samples) > ALPHA, counts
    wrong = np.array([0.47, 0.21, 0.16, 0.11, 0.05, 0.0])  # total variation 0.03 from p
    assert chi_square_p(counts, wrong, samples) < ALPHA


def test_the_ranking_starts_with_the_winner_and_names_distinct_tokens() -> None:
    ids, probs = np.array([40, 3, 17, 9]), np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32)
    dense = np.zeros(50)
    dense[ids] = probs
    for position in range(200):
        exps = exponentials(5, position, 50)
        ranking = race_ranking(ids, probs, exps, 3)
        assert ranking[0] == race_winner(dense, exps) and len(set(ranking)) == 3 and set(ranking) <= set(ids.tolist())
    assert len(race_ranking(ids, probs, exponentials(5, 0, 50), 10)) == 4  # at most the support


def test_race_noise_keeps_rows_until_the_output_passes_them() -> None:
    noise = RaceNoise(seed=9, vocab_size=20)
    rows = noise.rows([4, 5, 5])
    assert rows.shape == (3, 20) and np.array_equal(rows[1], rows[2])
    assert np.array_equal(rows[0], exponentials(9, 4, 20))
    noise.forget_before(5)
    assert np.array_equal(noise.rows([5])[0], exponentials(9, 5, 20))


def test_a_session_races_when_seeded_sampled_and_exact() -> None:
    sampled, exact = SamplingParams(temperature=1.0), AcceptanceParams()
    assert race_seed(7, sampled, exact) == 7
    assert race_seed(None, sampled, exact) is None  # unseeded: speculative sampling
    assert race_seed(7, SamplingParams(temperature=0.0), exact) is None  # greedy
    assert race_seed(7, sampled, AcceptanceParams("lenient", 1.0)) is None  # speculative sampling with a seed

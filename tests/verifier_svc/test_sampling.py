"""standardize must build exactly the distribution transformers' own warpers sample from."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specdec.sampling_params import SamplingParams
from verifier_svc.sampling import greedy_tokens, sample_token, standardize

VOCAB = 50
ROWS = 16

# (temperature, top_k, top_p): each warper alone, together, at extremes, and k beyond the vocabulary.
PARAMS_TABLE = [
    (1.0, 0, 1.0),
    (0.7, 0, 1.0),
    (1.8, 0, 1.0),
    (1.0, 5, 1.0),
    (1.0, 1, 1.0),
    (1.0, 0, 0.9),
    (1.0, 0, 0.3),
    (1.0, 0, 0.01),
    (0.5, 10, 0.8),
    (1.3, 3, 0.5),
    (0.9, 40, 0.95),
    (1.0, 1000, 1.0),
    (2.5, 7, 0.99),
]


def transformers_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """What `generate(do_sample=True)` samples from: float32 scores through the warpers, in
    generate's order (a warper is only added when it is switched on), then softmax."""
    input_ids = torch.zeros((logits.shape[0], 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(float(temperature))(input_ids, logits.float())
    if top_k > 0:
        scores = TopKLogitsWarper(top_k)(input_ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(input_ids, scores)
    return scores.softmax(dim=-1)


def random_logits(seed: int, with_ties: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if with_ties:  # small integers: many ties, also at the top-k and top-p boundaries
        return torch.randint(-3, 4, (ROWS, VOCAB), generator=gen).float()
    return 3.0 * torch.randn(ROWS, VOCAB, generator=gen)


@pytest.mark.parametrize("with_ties", [False, True])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), PARAMS_TABLE)
def test_standardize_equals_transformers_warpers(temperature: float, top_k: int, top_p: float, with_ties: bool) -> None:
    seed = 2 * PARAMS_TABLE.index((temperature, top_k, top_p)) + int(with_ties)
    logits = random_logits(seed, with_ties=with_ties)
    original = logits.clone()

    probs = standardize(logits, SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p))
    expected = transformers_probs(logits, temperature, top_k, top_p)

    assert probs.dtype == torch.float32 and probs.shape == (ROWS, VOCAB)
    assert torch.equal(probs > 0, expected > 0), "kept a different set of tokens than transformers"
    torch.testing.assert_close(probs, expected, rtol=0, atol=0)  # same ops in the same order: bitwise equal
    torch.testing.assert_close(probs.sum(dim=-1), torch.ones(ROWS), rtol=0, atol=1e-5)
    assert torch.equal(logits, original), "standardize modified its input"


def test_filters_actually_filter() -> None:
    """Guards the table above against a transformers reference that silently filters nothing."""
    logits = random_logits(seed=7, with_ties=False)
    assert (standardize(logits, SamplingParams(top_k=5)) > 0).sum(dim=-1).eq(5).all()
    kept = (standardize(logits, SamplingParams(top_p=0.5)) > 0).sum(dim=-1)
    assert (kept >= 1).all() and (kept < VOCAB).all()


def test_top_p_hand_case() -> None:
    # probs 0.5, 0.3, 0.2; ascending cumulative mass 0.2, 0.5, 1.0; top_p = 0.75 removes what
    # sits at or below 0.25: the 0.2 token only.
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    probs = standardize(logits, SamplingParams(top_p=0.75))
    torch.testing.assert_close(probs, torch.tensor([[0.625, 0.375, 0.0]]))
    # Exactly at the boundary (four tokens of 0.25, top_p = 0.5: cumulative 0.25, 0.5 <= 0.5)
    # a token is removed, as in transformers.
    uniform = standardize(torch.zeros(1, 4), SamplingParams(top_p=0.5))
    assert (uniform > 0).sum().item() == 2


def test_top_k_keeps_ties_at_the_boundary() -> None:
    logits = torch.tensor([[4.0, 1.0, 2.0, 2.0, 0.0]])
    probs = standardize(logits, SamplingParams(top_k=2))
    assert (probs > 0).tolist() == [[True, False, True, True, False]]


def test_top_k_1_is_one_hot_argmax() -> None:
    logits = random_logits(seed=3, with_ties=False)
    probs = standardize(logits, SamplingParams(temperature=0.8, top_k=1))
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(dim=-1), VOCAB).float())


def test_tiny_top_p_keeps_the_most_likely_token() -> None:
    logits = random_logits(seed=4, with_ties=False)
    probs = standardize(logits, SamplingParams(top_p=1e-9))
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(dim=-1), VOCAB).float())


def test_low_precision_logits_are_upcast() -> None:
    logits = random_logits(seed=5, with_ties=False).bfloat16()
    probs = standardize(logits, SamplingParams(temperature=0.7, top_k=20, top_p=0.9))
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, transformers_probs(logits.float(), 0.7, 20, 0.9), rtol=1e-6, atol=1e-7)


def test_temperature_changes_the_distribution() -> None:
    logits = random_logits(seed=6, with_ties=False)
    hot = standardize(logits, SamplingParams(temperature=2.0))
    cold = standardize(logits, SamplingParams(temperature=0.5))
    torch.testing.assert_close(hot, (logits / 2.0).softmax(dim=-1))
    assert (cold.max(dim=-1).values > hot.max(dim=-1).values).all()


def test_greedy_temperature_is_rejected() -> None:
    with pytest.raises(ValueError):
        standardize(torch.zeros(1, 4), SamplingParams(temperature=0.0))


def test_greedy_tokens_takes_the_first_maximum() -> None:
    logits = torch.tensor(
        [
            [0.0, 5.0, 5.0, 1.0],
            [2.0, 2.0, 2.0, 2.0],
            [-1.0, -3.0, -1.0, -2.0],
            [0.0, 1.0, 2.0, 3.0],
        ]
    )
    tokens = greedy_tokens(logits)
    assert tokens.dtype == torch.int64
    assert tokens.tolist() == [1, 0, 0, 3]


def test_greedy_tokens_bfloat16_ties() -> None:
    # 1.0 and 1.001 are the same bfloat16 value: a tie in the dtype the model produced.
    logits = torch.tensor([[0.0, 1.0, 1.001, 0.5]]).bfloat16()
    assert greedy_tokens(logits).tolist() == [1]


def test_sample_token_follows_the_weights() -> None:
    """Chi-square over 20,000 draws from unnormalized weights with zeros: every token's count
    matches its share, and a weight-0 token (first, inside, last) never comes up."""
    from scipy.stats import chisquare

    weights = torch.tensor([0.0, 3.0, 0.0, 1.0, 0.5, 0.0, 2.5, 0.0])
    generator = torch.Generator().manual_seed(7)
    counts = torch.bincount(torch.tensor([sample_token(weights, generator) for _ in range(20_000)]), minlength=len(weights))
    assert counts[weights == 0].sum() == 0
    expected = weights[weights > 0].double() / float(weights.sum()) * 20_000
    assert chisquare(counts[weights > 0].double().numpy(), expected.numpy()).pvalue > 1e-4
    # the test has power: a sampler one weight off fails it
    shifted = expected.clone()
    shifted[0], shifted[1] = shifted[0] * 1.1, shifted[1] - shifted[0] * 0.1
    assert chisquare(counts[weights > 0].double().numpy(), shifted.numpy()).pvalue < 1e-4


def test_sample_token_at_the_top_of_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """A uniform that rounds u x sum up to the sum still draws a token of positive weight."""
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(1.0, dtype=torch.float64))
    assert sample_token(torch.tensor([0.25, 0.75, 0.0, 0.0]), torch.Generator()) == 1
    with pytest.raises(ValueError, match="positive sum"):
        sample_token(torch.zeros(4), torch.Generator())

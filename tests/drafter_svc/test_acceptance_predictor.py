"""acceptance_predictor: features and the online logistic model (no model, no services)."""

from __future__ import annotations

import numpy as np
import pytest

from drafter_svc.acceptance_predictor import FEATURES, AcceptancePredictor, chain_acceptance, node_features
from specdec.acceptance_rate import AcceptanceRate
from drafter_svc.draft import Draft


def test_point_mass_features_are_zero_but_for_the_bias_and_what_varies() -> None:
    """Only the bias is constant over point-mass drafts: a second constant input would be a
    second bias and multiply its learning rate."""
    rows = np.vstack([
        node_features(Draft.point_masses(range(100, 100 + n), match_lengths=[m] * n), range(n))
        for n in (1, 4, 8) for m in (2, 5, 16)
    ])
    constant = [FEATURES[j] for j in range(len(FEATURES)) if np.ptp(rows[:, j]) == 0 and rows[0, j] != 0]
    assert constant == ["bias"]
    first = node_features(Draft.point_masses([7]), [0])[0]
    assert first.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_stochastic_draft_features_carry_q_and_its_entropy() -> None:
    draft = Draft(token_ids=[5], parents=[-1], q_token_ids=[[5, 6]], q_probs=[[0.25, 0.75]])
    row = dict(zip(FEATURES, node_features(draft, [0])[0]))
    assert row["q_missing"] == pytest.approx(0.75)
    assert row["q_entropy"] == pytest.approx(-(0.25 * np.log(0.25) + 0.75 * np.log(0.75)) / np.log(16))


def test_a_fresh_predictor_predicts_the_session_rate() -> None:
    features = node_features(Draft.point_masses(range(100, 104), match_lengths=[4] * 4), range(4))
    for alpha in (0.1, 0.5, 0.9):
        assert AcceptancePredictor().predict(features, alpha) == pytest.approx([alpha] * 4)


def test_the_bias_moves_at_the_learning_rate() -> None:
    """One SGD step on point-mass first tokens moves the logit by lr x (label - prediction) x
    |x|^2 where only bias and session rate are non-zero: never a multiple of it."""
    predictor = AcceptancePredictor(learning_rate=0.05, l2=0.0)
    features = node_features(Draft.point_masses([7]), [0])
    predictor.update(features, [1.0], 0.5)  # logit(0.5) = 0: only the bias input is non-zero
    assert predictor.weights[1] == pytest.approx(0.05 * 0.5)
    assert np.count_nonzero(predictor.weights[2:]) == 0


def test_learns_position_from_labels() -> None:
    """Acceptance that falls with depth (0.9 at depth 1, 0.5 at depth 8) is learned."""
    rng = np.random.default_rng(0)
    predictor = AcceptancePredictor()
    features = node_features(Draft.point_masses(range(100, 108), match_lengths=[4] * 8), range(8))
    truth = np.linspace(0.9, 0.5, 8)
    for _ in range(6000):
        predictor.update(features, (rng.random(8) < truth).astype(float).tolist(), 0.6)
    predicted = predictor.predict(features, 0.6)
    assert predicted[0] > predicted[-1] + 0.2
    assert np.abs(predicted - truth).max() < 0.1


def test_learns_acceptance_given_the_path_accepted_not_past_a_rejection() -> None:
    """Rounds are easy (each node accepted with 0.97) or hard (0.3), half and half, and every node
    is labelled, as the verifier does. Past a rejection the labels are the marginal rate, ~0.63
    at every depth; a node whose path was accepted is in an easy round more often the deeper it
    is. The predictor learns the latter (what a policy deciding to draft deeper needs)."""
    rng = np.random.default_rng(0)
    predictor = AcceptancePredictor()
    features = node_features(Draft.point_masses(range(100, 108), match_lengths=[4] * 8), range(8))
    rounds = np.array([rng.random(8) < (0.97 if rng.random() < 0.5 else 0.3) for _ in range(4000)], dtype=float)
    for labels in rounds:
        predictor.update(features, labels.tolist(), 0.6)
    reached = np.cumprod(np.hstack([np.ones((len(rounds), 1)), rounds[:, :-1]]), axis=1)
    given_path = (rounds * reached).sum(0) / reached.sum(0)  # ~0.63, 0.82, 0.90, 0.95, 0.97 ...
    predicted = predictor.predict(features, 0.6)
    assert np.all(np.diff(predicted) > 0)
    assert np.abs(predicted[5:] - given_path[5:]).max() < 0.05
    assert predicted[5:].min() > rounds.mean() + 0.25


def test_session_rate_and_chain_acceptance() -> None:
    session = AcceptanceRate(prior=0.5, rate=0.3)
    session.update([1.0, 1.0])
    assert session.alpha == pytest.approx(0.5 + (1 - 0.7**2) * 0.5)
    assert chain_acceptance([0.5, 0.5]).tolist() == [1.0, 0.5, 0.25]

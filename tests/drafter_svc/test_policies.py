"""policies: each draft-length policy class on its own, over a fresh session's estimates."""

from __future__ import annotations

import numpy as np
import pytest

from drafter_svc.draft import Draft
from drafter_svc.draft_tree import primary_path
from drafter_svc.policies.auto import AutoPolicy
from drafter_svc.policies.copy_confidence import CopyConfidencePolicy
from drafter_svc.policies.depth_math import expected_tokens, threshold_depth
from drafter_svc.policies.fixed import FixedPolicy
from drafter_svc.policies.leviathan import LeviathanPolicy
from drafter_svc.policies.policy_state import LearnedKind, PolicyState
from drafter_svc.policies.registry import POLICY_NAMES, policy_named
from drafter_svc.policies.session_estimates import SessionEstimates
from drafter_svc.policies.threshold_policy import ThresholdPolicy
from specdec.round_price import RoundPrice

CHAIN = Draft.point_masses(range(100, 108), match_lengths=[3] * 8)
PATH = primary_path(CHAIN)
PRICE = RoundPrice(node_cost=0.033, round_overhead=0.19, plain_seconds=0.057)  # as a verifier prices a lone round


def session(alpha: float = 0.5, drafter: str = "copy") -> SessionEstimates:
    estimates = SessionEstimates(drafter, PolicyState(), price=PRICE)
    estimates.session.alpha = alpha
    estimates.copy_session.alpha = alpha
    return estimates


def test_fixed_sends_the_whole_draft_length_and_drafts_every_step() -> None:
    policy = FixedPolicy()
    assert policy.depth(session(0.01), CHAIN, PATH, 8, 8, 0.05, False) == 8
    assert policy.keep_drafting(session(0.01), Draft.point_masses([1, 2]), 8, 8, 1.0, 1.0, True)
    assert not policy.adaptive and not policy.prices_rounds
    assert policy.send_copy(session(), CHAIN, PATH, 8, 8, 0.01, 0.0, False)


def test_copy_confidence_sends_the_matched_length() -> None:
    policy = CopyConfidencePolicy()
    assert policy.depth(session(), CHAIN, PATH, 8, 8, 0.0, False) == 3
    assert policy.depth(session(), CHAIN, PATH, 2, 2, 0.0, False) == 2
    assert policy.depth(session(), Draft.point_masses(range(5)), list(range(5)), 4, 4, 0.0, False) == 4
    assert policy.adaptive and not policy.prices_rounds


def test_threshold_policy_stops_where_the_predicted_rejection_crosses_its_threshold() -> None:
    policy = ThresholdPolicy()
    sure, doubtful = session(0.99), session(0.3)
    assert policy.depth(sure, CHAIN, PATH, 8, 8, 0.0, False) == 8
    assert policy.depth(doubtful, CHAIN, PATH, 8, 8, 0.0, False) == 1  # the token that crosses is sent
    for estimates in (sure, doubtful):
        assert policy.depth(estimates, CHAIN, PATH, 8, 8, 0.0, False) == threshold_depth(
            estimates.predict(CHAIN, PATH), estimates.threshold()
        )
    assert policy.keep_drafting(doubtful, Draft.point_masses([]), 8, 8, 0.01, 0.0, False)  # the first token always
    assert not policy.keep_drafting(doubtful, Draft.point_masses([1]), 8, 8, 0.01, 0.0, False)
    assert policy.keep_drafting(sure, Draft.point_masses([1, 2, 3]), 8, 8, 0.01, 0.0, False)


@pytest.mark.parametrize("alpha", [0.2, 0.6, 0.9, 0.99])
def test_leviathan_sends_the_argmax_of_expected_tokens_per_unit_of_cost(alpha: float) -> None:
    policy, estimates = LeviathanPolicy(), session(alpha)
    cost = estimates.cost()
    rates = [expected_tokens(alpha, d) / cost.of(d) for d in range(9)]
    assert policy.depth(estimates, CHAIN, PATH, 8, 8, 0.0, False) == int(np.argmax(rates))
    optimum = int(np.argmax(rates))  # with free steps a model drafter drafts up to it
    chains = [Draft.point_masses(range(j)) for j in range(8)]
    assert [policy.keep_drafting(estimates, c, 8, 8, 0.0, 0.0, False) for c in chains] == [j < optimum for j in range(8)]
    assert policy.prices_rounds


def test_auto_drafts_deep_when_acceptance_is_predicted_high_and_not_at_all_when_low() -> None:
    policy = AutoPolicy()
    assert policy.depth(session(0.99), CHAIN, PATH, 8, 8, 0.0, False) == 8
    assert policy.depth(session(0.01), CHAIN, PATH, 8, 8, 0.0, False) == 0
    # A costly model step at a poor rate does not pay even for the first token.
    assert not policy.keep_drafting(session(0.1, "onnx-quantized"), Draft.point_masses([]), 8, 8, 1.0, 0.0, False)
    assert policy.keep_drafting(session(0.99, "onnx-quantized"), Draft.point_masses([]), 8, 8, 0.001, 0.0, False)


def test_auto_weighs_a_copy_against_plain_decoding_when_the_model_cannot_draft() -> None:
    policy = AutoPolicy()
    assert policy.send_copy(session(0.99), CHAIN, PATH, 8, 8, None, 0.0, False)
    assert not policy.send_copy(session(0.01), CHAIN, PATH, 8, 8, None, 0.0, False)


def test_the_registry_names_one_class_per_policy_and_learned_state_is_keyed_by_a_named_kind() -> None:
    assert POLICY_NAMES == ("auto", "fixed", "leviathan", "specdec++", "copy-confidence")
    assert [type(policy_named(name)).__name__ for name in POLICY_NAMES] == [
        "AutoPolicy", "FixedPolicy", "LeviathanPolicy", "ThresholdPolicy", "CopyConfidencePolicy"
    ]
    with pytest.raises(ValueError, match="unknown draft policy"):
        policy_named("longest")
    estimates = SessionEstimates("hybrid", PolicyState(), greedy=False, race=True, partial_prompt=True)
    assert estimates.kind() == LearnedKind("hybrid", greedy=False, race=True, partial=True)
    assert estimates.kind(copied=True) == LearnedKind("copy", greedy=False, race=True)
    assert set(estimates.state.mean_acceptance) == {estimates.kind(), estimates.kind(copied=True)}

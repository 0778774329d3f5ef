"""`leviathan`: Leviathan et al. (2023), sections 3.1 and 3.2, with the session's running rate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from drafter_svc.draft import Draft
from drafter_svc.policies.depth_math import best_depth, expected_tokens, scaled_nodes
from drafter_svc.policies.pricing_policy import PricingPolicy
from drafter_svc.policies.session_estimates import SessionEstimates
from specdec.round_price import RoundPrice


class LeviathanPolicy(PricingPolicy):
    """With the session's running acceptance rate alpha and the round's cost, the d maximizing
    expected tokens per unit of cost, (1 - alpha^(d+1)) / ((1 - alpha) (1 + c0 + c n(d))) (n(d):
    nodes of the cut tree; c0 = 0 and a chain give Leviathan's own (1 - a^(K+1)) / ((1 - a)(K c + 1))).
    A model drafter drafts up to that optimal K, each step priced at c = step seconds / plain round
    seconds."""

    name: ClassVar[str] = "leviathan"

    def gains(self, session: SessionEstimates, draft: Draft, path: Sequence[int], depths: range, copied: bool) -> list[float]:
        alpha = (session.copy_session if copied else session.session).alpha
        return [expected_tokens(alpha, d) for d in depths]

    def chain_pays(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, cost: RoundPrice, step: float,
        first: float,
    ) -> bool:
        costs = [cost.of(scaled_nodes(k, max_depth, max_nodes)) + step * k + first * (k > 0) for k in range(max_depth + 1)]
        return len(chain) < best_depth([expected_tokens(session.session.alpha, k) for k in range(max_depth + 1)], costs)

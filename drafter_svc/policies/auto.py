"""`auto`: SpecDec++'s per-token predictions priced with Leviathan's cost model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from drafter_svc.acceptance_predictor import chain_acceptance
from drafter_svc.draft import Draft
from drafter_svc.policies.depth_math import scaled_nodes
from drafter_svc.policies.pricing_policy import PricingPolicy
from drafter_svc.policies.session_estimates import SessionEstimates
from specdec.round_price import RoundPrice


class AutoPolicy(PricingPolicy):
    """The d maximizing E[tokens emitted] / cost, with E[tokens] = sum_{j=0..d} prod_{i<=j} a_i
    from the online predictor: the expected-rate objective of Leviathan's section 3 without its
    i.i.d. assumption.

    A model drafter stops when no deeper depth promises more tokens per unit of cost than the best
    depth within the chain so far, every drafted step counted. The acceptances of tokens not yet
    drafted are extrapolated: under greedy verification from the last token's prediction (an easy
    span runs on); when sampling, and before the first token, from the session's rate (a sampled
    token's own q tells nothing of the next one's).

    A hybrid session sends its copy draft when the copy's best depth (by the copy predictor, no
    drafting steps) promises more tokens per unit of cost than the model's best chain at the
    session's rate (with its steps and catch-up), or, when the model cannot draft this round,
    than plain decoding."""

    name: ClassVar[str] = "auto"

    def gains(self, session: SessionEstimates, draft: Draft, path: Sequence[int], depths: range, copied: bool) -> list[float]:
        return list(np.cumsum(chain_acceptance(session.predict(draft, path, copied))))[: len(depths)]

    def chain_pays(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, cost: RoundPrice, step: float,
        first: float,
    ) -> bool:
        j = len(chain)
        predicted = session.predict(chain, range(j)) if j else np.zeros(0)
        survive = list(chain_acceptance(predicted))
        following = float(predicted[-1]) if j and session.greedy else session.session.alpha
        while len(survive) <= max_depth:
            survive.append(survive[-1] * following)
        gains = np.cumsum(survive)

        def rate(depth: int, steps: int) -> float:
            return float(gains[depth]) / (cost.of(scaled_nodes(depth, max_depth, max_nodes)) + step * steps + first * (steps > 0))

        return max(rate(e, e) for e in range(j + 1, max_depth + 1)) > max(rate(d, j) for d in range(j + 1))

    def send_copy(
        self, session: SessionEstimates, copy_draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float | None, catch_up_seconds: float, reads_prompt: bool,
    ) -> bool:
        gains, costs = self.gains_and_costs(session, copy_draft, path, max_depth, max_nodes, 0.0, copied=True)
        copy_rate = max(g / c for g, c in zip(gains[1:], costs[1:]))
        cost = session.cost()
        if step_seconds is None:
            return copy_rate > 1.0 / cost.of(0)
        step, first = session.step_cost(step_seconds), session.catch_up_cost(catch_up_seconds, reads_prompt, max_depth)
        return copy_rate > max(session.chain_rates(cost, step, first, max_depth, max_nodes))

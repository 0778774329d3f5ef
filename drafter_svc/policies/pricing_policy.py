"""What the pricing policies (`leviathan`, `auto`) share: each depth's expected tokens over the
round's cost in plain rounds, the best ratio sent, and probes after declining.

A round's cost is its pass as the verifier prices it (SessionEstimates.cost, with the node budget
scaled to the depth) plus, for a model drafter, every step it drafted: steps are sunk once the
policy cuts the draft, but part of the round's cost. After PROBE_AFTER declined rounds the session sends its best
non-empty depth once (a probe), and a model drafter drafts its first step for it, unless that
step (with a prompt left unread, the whole read) costs a plain round or more.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from drafter_svc.draft import Draft
from drafter_svc.draft_tree import nodes_within
from drafter_svc.policies.depth_math import best_depth, scaled_nodes
from drafter_svc.policies.draft_length_policy import DraftLengthPolicy
from drafter_svc.policies.session_estimates import SessionEstimates
from specdec.round_price import RoundPrice


class PricingPolicy(DraftLengthPolicy):
    """argmax over depths d of gains(d) / cost(d); subclasses say what a depth gains and where a
    model drafter's chain stops paying."""

    name: ClassVar[str] = ""
    prices_rounds: ClassVar[bool] = True

    @abstractmethod
    def gains(self, session: SessionEstimates, draft: Draft, path: Sequence[int], depths: range, copied: bool) -> list[float]:
        """E[tokens emitted] by a round that sends `draft` cut to each of `depths`."""
        ...

    @abstractmethod
    def chain_pays(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, cost: RoundPrice, step: float,
        first: float,
    ) -> bool:
        """Whether a model drafter that has drafted `chain` should draft on: the round's `cost`,
        `step` per drafted token and `first` (the first step's extra), in plain rounds."""
        ...

    def gains_and_costs(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> tuple[list[float], list[float]]:
        """E[tokens emitted] and the round's cost in plain rounds, per depth 0..len(path) (capped
        at max_depth)."""
        cost = session.cost()
        drafted = session.step_cost(step_seconds) * len(path)  # sunk, but part of this round's cost
        depths = range(min(len(path), max_depth) + 1)
        costs = [cost.of(min(scaled_nodes(d, max_depth, max_nodes), nodes_within(draft, d))) + drafted for d in depths]
        return self.gains(session, draft, path, depths, copied), costs

    def depth(
        self, session: SessionEstimates, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int,
        step_seconds: float, copied: bool,
    ) -> int:
        gains, costs = self.gains_and_costs(session, draft, path, max_depth, max_nodes, step_seconds, copied)
        if session.probe_due():
            session.probing = True
            return 1 + best_depth(gains[1:], costs[1:])
        return best_depth(gains, costs)

    def keep_drafting(
        self, session: SessionEstimates, chain: Draft, max_depth: int, max_nodes: int, step_seconds: float,
        catch_up_seconds: float, reads_prompt: bool,
    ) -> bool:
        j = len(chain)
        step = session.step_cost(step_seconds)
        # paid by any draft (sunk once j > 0)
        first = session.catch_up_cost(catch_up_seconds, reads_prompt, max_depth) if j == 0 else 0.0
        # No probe that costs more than a plain round; nor one that reads a prompt left unread
        # because drafting would not pay: the read would not be shared.
        whole = session.step_cost(catch_up_seconds) if reads_prompt and session.prompt_unread else first
        if session.probe_due() and j == 0 and whole < 1.0:
            return True
        return self.chain_pays(session, chain, max_depth, max_nodes, session.cost(), step, first)

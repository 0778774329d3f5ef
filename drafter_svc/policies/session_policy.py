"""One generation's draft-length policy: its session's estimates and the rule that decides.

The round loop asks it four things: whether to draft at all (`may_draft`), what to send of a
draft (`choose`), whether a model drafter should pay for its next step (`keep_drafting`), and
whether a hybrid session sends its copy draft (`send_copy`); then it hands it the verdict
(`observe`, `observe_unsent_copy`, SessionEstimates).
"""

from __future__ import annotations

from drafter_svc.draft import Draft
from drafter_svc.draft_tree import cut, node_depths, primary_path
from drafter_svc.policies.depth_math import scaled_nodes
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.policies.registry import policy_named
from drafter_svc.policies.session_estimates import SessionEstimates
from specdec.round_price import RoundPrice


class SessionPolicy(SessionEstimates):
    """The session's estimates with the policy `name` (registry.POLICY_NAMES) deciding."""

    def __init__(
        self, name: str, drafter: str, state: PolicyState, prompt_tokens: int = 0, greedy: bool = True, max_new_tokens: int = 0,
        race: bool = False, partial_prompt: bool = False, price: RoundPrice = RoundPrice(), open_sessions: int = 0,
    ) -> None:
        self.rule = policy_named(name)
        super().__init__(drafter, state, prompt_tokens, greedy, max_new_tokens, race, partial_prompt, price, open_sessions)

    @property
    def name(self) -> str:
        return self.rule.name

    def may_draft(self) -> bool:
        """False when this policy will send an empty round whatever the drafter proposes: it
        prices rounds, and a round of one node costs two plain passes or more, so no draft can
        pay (one node emits two tokens at best)."""
        return not self.rule.prices_rounds or self.cost().of(1) < 2.0

    def depth(self, draft: Draft, max_depth: int, max_nodes: int, step_seconds: float = 0.0, copied: bool = False) -> int:
        """The depth this policy sends of `draft` (drafted at most max_depth deep, its primary
        path by a model drafter at `step_seconds` a step; 0 for a free drafter; copied: a hybrid
        session's copy draft)."""
        path = primary_path(draft)
        if not path:
            return max_depth
        return self.rule.depth(self, draft, path, max_depth, max_nodes, step_seconds, copied)

    def choose(self, draft: Draft, max_depth: int, max_nodes: int, step_seconds: float = 0.0, copied: bool = False) -> Draft:
        """`draft` cut to this policy's depth and the node budget scaled to it."""
        d = self.depth(draft, max_depth, max_nodes, step_seconds, copied)
        if d >= max(node_depths(draft), default=0) and len(draft) <= scaled_nodes(d, max_depth, max_nodes):
            return draft
        return cut(draft, d, scaled_nodes(d, max_depth, max_nodes))

    def keep_drafting(
        self, chain: Draft, max_depth: int, max_nodes: int, step_seconds: float, catch_up_seconds: float = 0.0,
        reads_prompt: bool = False,
    ) -> bool:
        """Whether a model drafter that has drafted `chain` (the first j tokens of a chain, j >= 0;
        a step takes `step_seconds`, and the first one catch_up_seconds more, which with
        reads_prompt is the prompt's one-time read) should pay for token j + 1 of a draft at most
        max_depth deep with max_nodes nodes (drafter.KeepDrafting)."""
        if len(chain) >= max_depth:
            return False
        return self.rule.keep_drafting(self, chain, max_depth, max_nodes, step_seconds, catch_up_seconds, reads_prompt)

    def send_copy(
        self, copy_draft: Draft, max_depth: int, max_nodes: int, step_seconds: float | None, catch_up_seconds: float = 0.0,
        reads_prompt: bool = False,
    ) -> bool:
        """Whether a hybrid session sends the copy drafter's draft this round rather than drafting
        with its model. The model's steps take `step_seconds` each, its first `catch_up_seconds`
        more (reads_prompt: the prompt's read, spread over the session's rounds); None: it cannot
        draft this round (it reads the prompt meanwhile), so the copy draft is weighed against
        plain decoding."""
        path = primary_path(copy_draft)
        if not path:
            return False
        return self.rule.send_copy(self, copy_draft, path, max_depth, max_nodes, step_seconds, catch_up_seconds, reads_prompt)

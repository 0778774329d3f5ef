"""What one generation session knows while it drafts: its acceptance rates, the price of its
next round, the load, and when it last probed. Every draft-length policy reads it; none changes
it but through `observe`.

Costs are in plain decoding passes, as the verifier prices the session's next round
(specdec/round_price.py): the price of a new session's first round comes with the verifier's
ModelInfo, each later one with the verdict before it. The drafter adds only what the verifier
cannot see: the first round's pass also reads the prompt (the prefill, priced with the same
RoundPrice: RoundPrice.with_pending), a model drafter's steps in units of the plain pass's
seconds, and its one-time read of the prompt shared by the rounds the session has left
(`read_share`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from drafter_svc.acceptance_predictor import node_features
from drafter_svc.draft import Draft
from drafter_svc.draft_tree import primary_path
from drafter_svc.policies.depth_math import expected_tokens, scaled_nodes
from drafter_svc.policies.policy_state import LearnedKind, PolicyState
from specdec.acceptance_rate import AcceptanceRate
from specdec.round_price import RoundPrice

COPY = "copy"  # the drafter whose learned state a hybrid session's copy drafts share
# After this many rounds in a row in which a pricing policy sent nothing although the drafter had
# a draft, it sends its best non-empty depth once (a probe): without labels its estimates of the
# session could never recover. A probe whose first token is rejected doubles the wait before the
# next one, up to PROBE_AFTER_MAX; an accepted first token resets it.
PROBE_AFTER = 3
PROBE_AFTER_MAX = 12
# After this many sessions of a kind in a row left a long prompt unread (`read_prompt`), the next
# one reads it anyway: the kind's mean acceptance learns only from sessions that draft.
READ_AFTER_UNREAD = 4


class SessionEstimates:
    """One generation's estimates, over its drafter process's PolicyState."""

    def __init__(
        self, drafter: str, state: PolicyState, prompt_tokens: int = 0, greedy: bool = True, max_new_tokens: int = 0,
        race: bool = False, partial_prompt: bool = False, price: RoundPrice = RoundPrice(), open_sessions: int = 0,
    ) -> None:
        """prompt_tokens: the prompt's length, which the first round's pass scores too; greedy: the
        session's verification (else speculative sampling, or with `race` the exponential race);
        max_new_tokens: the session's limit (0: unknown; a model's read of the prompt is then
        priced against one round); partial_prompt: the drafter reads only the end of the prompt
        (its window), so its drafts are learned apart (LearnedKind); open_sessions: the sessions
        open on the verifier, this one included; price: the verifier's price of a first round
        alone in its pass (ModelInfo). A session that starts sharing passes, or without a price,
        starts from the latest price any session of this process got, where there is one."""
        self.drafter = drafter
        self.greedy = greedy
        self.race = race and not greedy
        self.partial_prompt = partial_prompt
        self.state = state
        self.session = AcceptanceRate(prior=state.drafter_acceptance(*self.kind()).alpha)
        # The copy drafts of a hybrid session: their own rate and predictor.
        self.copy_session = AcceptanceRate(prior=state.drafter_acceptance(*self.kind(copied=True)).alpha)
        self.load = 0  # rounds ahead of our last round in the verifier
        self.open_sessions = open_sessions  # on the verifier, as it last said
        shared_or_unknown = self.shared() or not price.known
        self.price = state.last_price if shared_or_unknown and state.last_price.known else price  # of the next round
        self.declined = 0  # rounds in a row that sent nothing although there was a draft
        self.prompt_tokens = prompt_tokens
        self.rounds = 0  # verdicts observed
        self.max_new_tokens = max_new_tokens
        self.emitted = 0  # tokens the verdicts emitted so far
        self.probe_after = PROBE_AFTER
        self.probing = False  # the round in flight is a probe
        self.prompt_unread = False  # read_prompt said no: a probe pays the whole read

    def kind(self, copied: bool = False) -> LearnedKind:
        """The key of PolicyState's learned acceptance for this session's drafts (a hybrid
        session's copy drafts with `copied`, which read the whole context)."""
        if copied:
            return LearnedKind(COPY, self.greedy, self.race, False)
        return LearnedKind(self.drafter, self.greedy, self.race, self.partial_prompt)

    def cost(self) -> RoundPrice:
        """The next round's price: the verifier's, but for the first round alone in its pass,
        whose pass also reads the prompt."""
        return self.price.with_pending(self.prompt_tokens - 1) if self.prefill_round() else self.price

    def shared(self) -> bool:
        """The session's rounds share the verifier's passes with other sessions' rounds."""
        return self.open_sessions >= 2

    def context(self) -> int:
        """The tokens in the session's verifier cache before its next round: prompt and emitted."""
        return self.prompt_tokens + self.emitted

    def prefill_round(self) -> bool:
        """The next round is the first, alone in its pass: the pass that reads the prompt."""
        return self.rounds == 0 and self.prompt_tokens > 1 and not self.shared()

    def read_share(self, max_depth: int) -> float:
        """The share of a model drafter's one-time read of the prompt that the next round pays:
        1 / the rounds the session has left at full depth."""
        if not self.max_new_tokens:
            return 1.0
        rounds = (self.max_new_tokens - self.emitted) / expected_tokens(self.session.alpha, max_depth)
        return 1.0 / max(1.0, rounds)

    def catch_up_cost(self, catch_up_seconds: float, reads_prompt: bool, max_depth: int) -> float:
        """What a model drafter's first step costs this round beyond a step, in step_cost's units:
        the tokens it catches up on, or with reads_prompt this round's read_share of the prompt."""
        return self.step_cost(catch_up_seconds) * (self.read_share(max_depth) if reads_prompt else 1.0)

    def step_cost(self, step_seconds: float) -> float:
        """One model-drafter step of `step_seconds` in units of the next round's plain pass
        (Leviathan's c): its share of a shared pass, the first pass (the prefill), or a lone
        plain pass; 0 without a price."""
        unit = self.cost().plain_seconds
        return step_seconds / unit if unit > 0 else 0.0

    def chain_rates(self, cost: RoundPrice, step: float, first: float, max_depth: int, max_nodes: int) -> list[float]:
        """Leviathan's expected tokens per unit of cost of a model drafter's chain of k = 0..max_depth
        tokens at the session's rate: the round's `cost`, `step` per token and, for k >= 1,
        `first` (the first step's extra), in plain rounds."""
        return [
            expected_tokens(self.session.alpha, k) / (cost.of(scaled_nodes(k, max_depth, max_nodes)) + (step * k + first) * (k > 0))
            for k in range(max_depth + 1)
        ]

    def read_prompt(self, step_seconds: float, read_seconds: float, max_depth: int, max_nodes: int) -> bool:
        """Whether a model drafter (steps of `step_seconds`) should read a long prompt beside the
        verifier's prefill (`read_seconds` beyond a step): its best chain at the session's rate,
        in a lone round after the first, with the part of the read that outlasts the prefill's
        pass spread over the session's rounds (read_share), emits more tokens per unit of cost
        than plain decoding; or
        READ_AFTER_UNREAD sessions of its kind in a row left theirs unread. Counts the sessions
        that do not read."""
        key, plain = self.kind(), self.price.plain_seconds
        if plain <= 0:  # no price: drafting is priced as free, so reading pays
            return True
        beside = self.cost().plain_seconds if self.prefill_round() else 0.0  # the prefill's pass
        first = max(0.0, read_seconds - beside) / plain * self.read_share(max_depth)
        rates = self.chain_rates(self.price, step_seconds / plain, first, max_depth, max_nodes)
        if max(rates[1:], default=0.0) > rates[0] or self.state.unread.get(key, 0) >= READ_AFTER_UNREAD:
            self.state.unread[key] = 0
            return True
        self.state.unread[key] = self.state.unread.get(key, 0) + 1
        self.prompt_unread = True
        return False

    def probe_due(self) -> bool:
        """A pricing policy has declined PROBE_AFTER (with backoff) rounds in a row: send the best
        depth of at least 1. Not in a batched pass, where the price of a node grows with the
        sessions sharing it and a decline is the load's, not a stale rate's; a session that
        declines under load probes once the load is gone."""
        return self.declined >= self.probe_after and not self.shared()

    def threshold(self) -> float:
        """specdec++'s stop threshold, divided by 1 + load_weight x the rounds queued ahead."""
        return self.state.stop_threshold / (1.0 + self.state.load_weight * self.load)

    def predict(self, draft: Draft, nodes: Sequence[int], copied: bool = False) -> np.ndarray:
        """The predicted acceptance of each of `nodes`, given its path is accepted."""
        session = self.copy_session if copied else self.session
        return self.state.predictor(*self.kind(copied)).predict(node_features(draft, nodes), session.alpha)

    def observe(
        self, sent: Draft, acceptance_probs: Sequence[float], queued_rounds: int, *, had_draft: bool,
        price: RoundPrice = RoundPrice(), open_sessions: int = 0, copied: bool = False, emitted: int = 0,
    ) -> None:
        """Learn from the verdict on `sent`: acceptance labels of its primary path, the next
        round's price and the verifier's load (queued_rounds, open_sessions). had_draft: the
        drafter had proposed something this round; price unknown: the last one stays; copied:
        `sent` was a hybrid session's copy draft, whose labels teach the copy predictor; emitted:
        the tokens the round emitted."""
        self.rounds += 1
        self.emitted += emitted
        self.load = max(0, queued_rounds)
        self.open_sessions = open_sessions
        self.state.last_open_sessions = open_sessions
        if price.known:
            self.price = self.state.last_price = price
        # A verifier's hard limit (--max-pass-rows) may have cut the tree: the nodes it kept, a
        # prefix, are the ones with labels.
        path = [i for i in primary_path(sent) if i < len(acceptance_probs)]
        if path:
            self._learn(sent, path, [acceptance_probs[i] for i in path], copied)
        self.declined = self.declined + 1 if had_draft and not path else 0
        if path and (not self.probing or acceptance_probs[path[0]] >= 0.5):
            self.probe_after = PROBE_AFTER
        elif path:
            self.probe_after = min(2 * self.probe_after, PROBE_AFTER_MAX)
        self.probing = False
        if had_draft and not path:
            # The policy chose not to draft: no labels. Relax towards the drafter's mean so that a
            # session whose acceptance once dropped tries again.
            mean = self.state.drafter_acceptance(*self.kind()).alpha
            self.session.alpha += 0.25 * (mean - self.session.alpha)

    def observe_unsent_copy(self, copy_draft: Draft, emitted: Sequence[int]) -> None:
        """Label a hybrid session's copy draft that was not sent with the tokens the round emitted:
        node j of its primary path, while the path agrees with the emitted tokens and they reach
        it, is 1 if it equals the emitted token, else 0, and the labels stop there. The emitted
        tokens follow the target's distribution, so these labels are unbiased."""
        path, labels = primary_path(copy_draft), []
        for node, token in zip(path, emitted):
            labels.append(float(copy_draft.token_ids[node] == token))
            if not labels[-1]:
                break
        if labels:
            self._learn(copy_draft, path[: len(labels)], labels, copied=True)

    def _learn(self, draft: Draft, path: Sequence[int], labels: list[float], copied: bool) -> None:
        session = self.copy_session if copied else self.session
        self.state.predictor(*self.kind(copied)).update(node_features(draft, path), labels, session.alpha)
        session.update(labels)
        self.state.drafter_acceptance(*self.kind(copied)).update(labels)

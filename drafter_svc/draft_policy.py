"""Draft-length policies: how deep each round's token tree goes, chosen per round.

Our drafters cost nothing, so each round drafts once at the request's draft length (the largest
depth allowed) and a policy cuts the tree down to the depth d it chooses, with the node budget
scaled in proportion (max_tree_nodes * d / num_draft_tokens). Policies, by name:

- `fixed`: d = num_draft_tokens, every round (what the service did before policies existed).
- `leviathan`: Leviathan et al. (2023), section 3.1 and 3.2: with the session's running acceptance
  rate alpha and the cost model of pass_cost.py, the d maximizing expected tokens per unit of
  cost, (1 - alpha^(d+1)) / ((1 - alpha) (1 + c0 + c n(d))) (n(d): nodes of the cut tree; c0 = 0
  and a chain give Leviathan's own (1 - a^(K+1)) / ((1 - a)(K c + 1))).
- `specdec++`: the threshold policy of SpecDec++ (Huang et al., 2024, Algorithm 2): add the
  primary path's tokens one by one while the predicted probability that some token so far is
  rejected, 1 - prod_i a_i, stays at or below `stop_threshold`; the token that crosses it is
  still sent. a_i come from the online predictor of acceptance_predictor.py.
- `copy-confidence`: d = the length of the context suffix the first token's prediction rests on
  (a copy draft's matched suffix, an n-gram draft's context): a long match predicts a long copy.
- `auto`: per-token predictions of specdec++ priced with the cost model of
  leviathan: the d maximizing E[tokens emitted] / cost, with E[tokens] = sum_{j=0..d} prod_{i<=j}
  a_i, the expected-rate objective of Leviathan's section 3 without its i.i.d. assumption.

Load: the verifier reports how many rounds of other sessions were ahead of each round; every
policy that prices nodes multiplies their cost by 1 + load_weight * queued_rounds, and specdec++
divides its threshold by the same factor. A node of our
pass delays every queued round too, and a verifier that batches (where a pass's fixed cost is
shared) pays for drafted tokens in compute that the other sequences need; shorter drafts under
load are what keeps speculation from getting slower than plain decoding (vLLM's complaint).

Pure: no I/O, no gRPC. `PolicyState` is per drafter process (learned acceptance, pass costs),
`SessionPolicy` per generation; asyncio runs them between awaits, so no locks are needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from drafter_svc.acceptance_predictor import AcceptancePredictor, SessionAcceptance, chain_acceptance, node_features
from drafter_svc.draft_tree import cut, node_depths, nodes_within, primary_path
from drafter_svc.drafter import Draft
from drafter_svc.pass_cost import PassCostModel, RelativeCost

POLICY_NAMES: tuple[str, ...] = ("auto", "fixed", "leviathan", "specdec++", "copy-confidence")
DEFAULT_STOP_THRESHOLD = 0.5  # the middle of SpecDec++'s grid {0.1, 0.3, 0.5, 0.7, 0.9}
DEFAULT_LOAD_WEIGHT = 1.0
# After this many rounds in a row in which a pricing policy (leviathan, auto) sent nothing although
# the drafter had a draft, it sends its best non-empty depth once: without labels its estimates
# of this session could never recover (a benchmark session declined every draft for 30 rounds).
PROBE_AFTER = 3


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one round of k i.i.d. drafts emits on average: sum_{j=0..k} alpha^j, which is
    (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al., equation 1)."""
    return float(sum(alpha**j for j in range(k + 1)))


def best_depth(gains: Sequence[float], costs: Sequence[float]) -> int:
    """argmax_d gains[d] / costs[d]; ties go to the shorter draft."""
    rates = [g / c for g, c in zip(gains, costs)]
    return int(np.argmax(np.asarray(rates) - 1e-12 * np.arange(len(rates))))


def leviathan_depth(alpha: float, max_depth: int, cost: RelativeCost) -> int:
    """Leviathan's optimal draft length for a chain: argmax over k in [0, max_depth] of
    expected_tokens(alpha, k) / cost.of(k)."""
    return best_depth([expected_tokens(alpha, k) for k in range(max_depth + 1)], [cost.of(k) for k in range(max_depth + 1)])


def threshold_depth(predicted: Sequence[float], stop_threshold: float) -> int:
    """SpecDec++'s stopping rule over predicted conditional acceptances a_1..a_K: the first k
    with 1 - prod_{i<=k} a_i > stop_threshold (that token included), else K."""
    survive = chain_acceptance(predicted)
    for k in range(1, len(survive)):
        if 1.0 - survive[k] > stop_threshold:
            return k
    return len(predicted)


def scaled_nodes(depth: int, max_depth: int, max_nodes: int) -> int:
    """The node budget for a cut to `depth`: the request's tree shape, scaled."""
    if max_depth == 0:
        return 0
    return min(max_nodes, max(depth, round(max_nodes * depth / max_depth)))


class PolicyState:
    """What one drafter process learns across sessions: an acceptance predictor per drafter
    kind, the verifier's pass costs, and each drafter's mean acceptance (where a session that
    stopped drafting relaxes to, so it tries again)."""

    def __init__(self, stop_threshold: float = DEFAULT_STOP_THRESHOLD, load_weight: float = DEFAULT_LOAD_WEIGHT) -> None:
        if not 0.0 <= stop_threshold <= 1.0:
            raise ValueError(f"stop_threshold must be in [0, 1], got {stop_threshold}")
        if load_weight < 0:
            raise ValueError(f"load_weight must be >= 0, got {load_weight}")
        self.stop_threshold = stop_threshold
        self.load_weight = load_weight
        self.costs = PassCostModel()
        self.predictors: dict[str, AcceptancePredictor] = {}
        self.mean_acceptance: dict[str, SessionAcceptance] = {}

    def predictor(self, drafter: str) -> AcceptancePredictor:
        return self.predictors.setdefault(drafter, AcceptancePredictor())

    def drafter_acceptance(self, drafter: str) -> SessionAcceptance:
        return self.mean_acceptance.setdefault(drafter, SessionAcceptance(rate=0.05))


class SessionPolicy:
    """One generation's policy: `choose` cuts each round's full-depth draft, `observe` learns
    from the verdict on what was sent."""

    def __init__(self, name: str, drafter: str, state: PolicyState) -> None:
        if name not in POLICY_NAMES:
            raise ValueError(f"unknown draft policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
        self.name = name
        self.drafter = drafter
        self.state = state
        self.session = SessionAcceptance(prior=state.drafter_acceptance(drafter).alpha)
        self.load = 0  # rounds ahead of our last round in the verifier
        self.declined = 0  # rounds in a row that sent nothing although there was a draft

    def cost(self) -> RelativeCost:
        return self.state.costs.relative().scaled(1.0 + self.state.load_weight * self.load)

    def depth(self, draft: Draft, max_depth: int, max_nodes: int) -> int:
        """The depth this policy sends of `draft` (drafted at most max_depth deep)."""
        path = primary_path(draft)
        if self.name == "fixed" or not path:
            return max_depth
        if self.name == "copy-confidence":
            return min(max_depth, draft.match_lengths[path[0]]) if draft.match_lengths else max_depth
        if self.name == "specdec++":
            threshold = self.state.stop_threshold / (1.0 + self.state.load_weight * self.load)
            return threshold_depth(self.predict(draft, path), threshold)
        cost = self.cost()
        depths = range(min(len(path), max_depth) + 1)
        costs = [cost.of(min(scaled_nodes(d, max_depth, max_nodes), nodes_within(draft, d))) for d in depths]
        if self.name == "leviathan":
            gains = [expected_tokens(self.session.alpha, d) for d in depths]
        else:  # auto
            gains = list(np.cumsum(chain_acceptance(self.predict(draft, path))))[: len(costs)]
        if self.declined >= PROBE_AFTER:
            return 1 + best_depth(gains[1:], costs[1:])  # probe: the best depth of at least 1
        return best_depth(gains, costs)

    def predict(self, draft: Draft, nodes: Sequence[int]) -> np.ndarray:
        return self.state.predictor(self.drafter).predict(node_features(draft, nodes), self.session.alpha)

    def choose(self, draft: Draft, max_depth: int, max_nodes: int) -> Draft:
        """`draft` cut to this policy's depth and the node budget scaled to it."""
        d = self.depth(draft, max_depth, max_nodes)
        if d >= max(node_depths(draft), default=0) and len(draft) <= scaled_nodes(d, max_depth, max_nodes):
            return draft
        return cut(draft, d, scaled_nodes(d, max_depth, max_nodes))

    def observe(
        self, sent: Draft, acceptance_probs: Sequence[float], verify_seconds: float, queued_rounds: int, *,
        first_round: bool, had_draft: bool,
    ) -> None:
        """Learn from the verdict on `sent`: acceptance labels of its primary path, the pass's
        cost (not the first round's, which includes the prefill, nor a round that queued), and
        the verifier's load. had_draft: the drafter had proposed something this round."""
        self.load = max(0, queued_rounds)
        if not first_round and queued_rounds == 0:
            self.state.costs.observe(len(sent), verify_seconds)
        path = primary_path(sent)
        if path:
            labels = [acceptance_probs[i] for i in path]
            self.state.predictor(self.drafter).update(node_features(sent, path), labels, self.session.alpha)
            self.session.update(labels)
            self.state.drafter_acceptance(self.drafter).update(labels)
        self.declined = self.declined + 1 if had_draft and not path else 0
        if had_draft and not path:
            # The policy chose not to draft: no labels. Relax towards the drafter's mean so that a
            # session whose acceptance once dropped tries again.
            mean = self.state.drafter_acceptance(self.drafter).alpha
            self.session.alpha += 0.25 * (mean - self.session.alpha)

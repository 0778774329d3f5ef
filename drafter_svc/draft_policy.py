"""Draft-length policies: how deep each round's token tree goes, chosen per round.

Each round the drafter drafts at most the request's draft length (the largest depth allowed;
the copy and n-gram drafters, which cost nothing, always draft that much, a model drafter stops
where `keep_drafting` says, "Drafting cost" below) and a policy cuts the tree down to the depth d
it chooses, with the node budget scaled in proportion (max_tree_nodes * d / num_draft_tokens).
Policies, by name:

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

Drafting cost: copy and n-gram drafts cost nothing, but a model drafter pays one model step per
chain token (on this CPU ~10 ms at a 300-token context with q and the draw at temperature 1,
against ~22-25 ms for a plain target pass, bench/drafter_calls.py: Leviathan's c, section 3.2,
is far from 0). Such a drafter asks `keep_drafting` before each step and stops where the policy
would not send deeper (SpecDec++, Algorithm 2: the stopping decision is made while drafting,
so the steps it saves are the drafter's own): `specdec++` stops once its
threshold is crossed; `leviathan` at its optimal K with each step priced at c = step seconds /
plain round seconds; `auto` when no deeper depth promises more tokens per unit of cost than the
best depth within the chain so far, with every drafted step counted; the acceptances of tokens not
yet drafted are extrapolated, under greedy verification, from the last token's prediction (an
easy span runs on), and when sampling from the session's rate (a sampled token's own q, say a
rare draw, tells nothing of the next one's: extrapolating it stopped chains early at temperature
1); before the first token, from the session's rate. Before the
first step this is the question whether to draft at all: a session whose model drafts would not
pay decodes plainly without running the drafter (and probes as below). That first step may have
to read the prompt first (after a short prompt, or when the session has not drafted with its
model yet): a one-time cost that every later model round of the session shares, so it is spread
over the rounds the session has left, its remaining tokens over the tokens a full-depth round
emits at its rate (`read_share`). Priced against one round, the read of a 54-token prompt cost
1.4 plain passes on a slow hour, more than a draft gains at acceptance 0.79: a session whose
first round did not read then decoded without its model to the end (127 rounds for 128 tokens
at T=1). Drafted steps are sunk when the policy
cuts the draft, but they are part of the round's cost, so `depth` counts them.

Load: a batching verifier scores the rounds of many sessions in one padded pass, and each verdict
says how many rounds that pass held (B), its seconds t, its padded new-token rows, the verifier's
fitted marginal seconds m of one more row (verifier_svc/pass_time.py) and the sessions open (S).
Under load a pass is compute-bound and padded to its longest round, so one more drafted node in
our round adds a row to every round of the next pass, about S of them (S = max(B, open
sessions)): S m seconds, where the measured pass yields B plain tokens in t_plain = t - m (rows -
B) seconds (the same pass with one row per round). In units of a plain round's share t_plain / B
a node costs c = S m B / t_plain, with no fixed overhead (LoadPrice). `leviathan` and `auto` price
nodes at c whenever the verifier is shared (S >= 2), so drafts shorten as the load grows, and
once c >= 1 no draft can pay (a node emits at most one token, for more than a plain round's
cost): the session sends empty rounds, plain decoding through the same path, and does not even
draft (`may_draft`); nor does it probe. A pass that held one round (a prompt's prefill runs
alone) gives S but not the per-round cost, which then comes from the latest pass of several
rounds that any session of the process saw. A lone session (S = 1) is priced by pass_cost.py at its
context (its prompt and the tokens emitted so far: a long cache makes every pass dearer).
`specdec++` has no costs; it divides its threshold by 1 + load_weight x the rounds queued
ahead, as do the pricing policies against a verifier that does not report its passes.

Copies beside a model drafter (the `hybrid` drafter): each round the copy drafter's draft
(prompt lookup, free) is there too, and `auto` sends it instead of drafting with the model when
its expected tokens per unit of cost, E[tokens] of its best depth by the copy predictor over the
round's cost (no drafting steps), beat the model's best chain: Leviathan's expected_tokens with
the session's model acceptance rate over the round's cost plus the steps (and the catch-up on
the tokens emitted since the model last ran). Every round labels the copy predictor, sent or not:
the emitted tokens follow the target's distribution (exact verification), so whether an unsent
copy token equals the emitted one, along the prefix where they agree, is an unbiased label of
its acceptance probability (greedy: exactly it), and the choice needs no exploration. Other
policies send the copy draft whenever there is one, cut by their own rule.

Prompts longer than the drafter's window: a model drafter reads only the last tokens of a long
prompt (onnx_drafter.PROMPT_WINDOW), so its drafts there agree with the target less (one traced
Spec-Bench run at T=1, `hybrid`: model labels averaged 0.57-0.87 per session after prompts of
611-926 tokens, 0.92-0.96 after prompts of 33-127). One learned state for both was wrong for
both: a long session started from the short ones' mean (0.93-0.96) and drafted full depth in its
first rounds, and each time it stopped drafting it relaxed back towards that mean and drafted a
token every fourth round, at a loss; a short session after long ones started at 0.63-0.77.
Such sessions (`partial_prompt`) have a predictor and a mean acceptance of their own. Their
drafter reads the window at its first model draft, priced as above; with overlap on (cores of its
own) it reads it beside the verifier's prefill instead, if its drafts are expected to pay at that
mean (`read_prompt`; on 2 shared cores the read delayed a long prompt's first token by ~0.1-0.3 s).

Pure: no I/O, no gRPC. `PolicyState` is per drafter process (learned acceptance, per drafter, per
kind of verification: greedy, speculative sampling or the exponential race, and per whether the
drafter reads the whole prompt; pass costs), `SessionPolicy` per generation; asyncio runs them
between awaits, so no locks are needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from drafter_svc.acceptance_predictor import AcceptancePredictor, SessionAcceptance, chain_acceptance, node_features
from drafter_svc.draft_tree import cut, node_depths, nodes_within, primary_path
from drafter_svc.draft import Draft
from drafter_svc.pass_cost import PassCostModel, RelativeCost

POLICY_NAMES: tuple[str, ...] = ("auto", "fixed", "leviathan", "specdec++", "copy-confidence")
COPY = "copy"  # the drafter whose learned state a hybrid session's copy drafts share
DEFAULT_STOP_THRESHOLD = 0.5  # the middle of SpecDec++'s grid {0.1, 0.3, 0.5, 0.7, 0.9}
DEFAULT_LOAD_WEIGHT = 1.0
# After this many rounds in a row in which a pricing policy (leviathan, auto) sent nothing although
# the drafter had a draft, it sends its best non-empty depth once: without labels its estimates
# of this session could never recover (a benchmark session declined every draft for 30 rounds).
PROBE_AFTER = 3
# A probe whose first token is rejected doubles the wait before the next one, up to this many
# declined rounds; an accepted first token resets it. A probe costs a drafted pass (c0 + c on
# this CPU, a fifth of a plain round): probing every fourth round of a session whose drafts are
# never accepted cost 4% of its speed in the synthetic tests, with backoff ~1.5%.
PROBE_AFTER_MAX = 12
# Where a drafter process's mean acceptance of each drafter starts, before any label: 0.5, but
# for the int8 copy of the target its measured rate (0.97 at temperature 0 and 1 over Spec-Bench,
# bench/results/drafter_quality-20261122-162526.md; 0.9 here for its prompt window). A model
# drafter whose sessions start from 0.5 looks not worth its steps (0.3-0.45 of a plain pass
# each), so they decline it; after a short prompt, which it must read before its first draft,
# nor do they probe it: the process then never drafted with it again (two of three fresh drafter
# processes on MT-bench and QA at temperature 0). A session's own labels still move its rate
# within a few rounds.
PRIOR_ACCEPTANCE: dict[str, float] = {"onnx-quantized": 0.9, "hybrid": 0.9}
# After this many sessions of a kind in a row left a long prompt unread (`read_prompt`), the next
# one reads it anyway: the kind's mean acceptance learns only from sessions that draft, and would
# otherwise never be tested again.
READ_AFTER_UNREAD = 4


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


@dataclass(frozen=True)
class LoadPrice:
    """The pass that scored a session's last round, as its verdict described it."""

    rounds: int  # B; 0: the verifier did not say
    seconds: float  # t
    rows: int  # B x T, padded
    row_seconds: float  # m, the verifier's marginal seconds of one more row
    open_sessions: int = 0  # sessions open on the verifier: the rounds the next pass may hold

    @property
    def batched(self) -> bool:
        return max(self.rounds, self.open_sessions) >= 2 and self.seconds > 0 and self.rounds > 0

    def plain_share(self) -> float:
        """t_plain / B: a plain round's share of the pass without its drafted rows, in seconds."""
        return max(self.seconds - self.row_seconds * max(0, self.rows - self.rounds), 1e-9) / self.rounds

    def node_cost(self) -> float:
        """c = S m / (t_plain / B): a drafted node pads every round of the next pass (S of them,
        S = max(B, open sessions)), in units of a plain round's share of the measured pass."""
        return max(self.rounds, self.open_sessions) * self.row_seconds / self.plain_share()

    def relative(self) -> RelativeCost:
        return RelativeCost(per_node=self.node_cost(), overhead=0.0)


class PolicyState:
    """What one drafter process learns across sessions: an acceptance predictor per drafter
    kind, the verifier's pass costs, and each drafter's mean acceptance (from PRIOR_ACCEPTANCE
    on; where a session that stopped drafting relaxes to, so it tries again)."""

    def __init__(self, stop_threshold: float = DEFAULT_STOP_THRESHOLD, load_weight: float = DEFAULT_LOAD_WEIGHT) -> None:
        if not 0.0 <= stop_threshold <= 1.0:
            raise ValueError(f"stop_threshold must be in [0, 1], got {stop_threshold}")
        if load_weight < 0:
            raise ValueError(f"load_weight must be >= 0, got {load_weight}")
        self.stop_threshold = stop_threshold
        self.load_weight = load_weight
        self.costs = PassCostModel()
        self.costs_seeded = False
        # Keyed by (drafter, greedy, race, partial): the labels of greedy verification are 1 when
        # a token is the target's argmax, a sampled session's are min(1, p/q) (p itself for a
        # copy), so the same draft has two acceptance rates (a copy of p = 0.6 is accepted whole,
        # or 0.6 of the time), and one predictor fed both is wrong for both. The exponential race
        # accepts a sampled draft less often than speculative sampling does (its labels:
        # verifier_svc/acceptance.py, race_agreement), so it is a third kind. `partial`: a model
        # drafter that reads only its window of a longer prompt (module docstring, "Prompts
        # longer than the drafter's window").
        self.predictors: dict[tuple[str, bool, bool, bool], AcceptancePredictor] = {}
        self.mean_acceptance: dict[tuple[str, bool, bool, bool], SessionAcceptance] = {}
        # The pass of the latest verdict any session got: a new session's first guess at the load
        # (with several verifiers, of whichever answered last), until its own first verdict.
        self.last_price: LoadPrice | None = None
        self.last_multi: LoadPrice | None = None  # the latest of those that held several rounds
        self.open_sessions = 0  # generations of this process under way (the servicer counts them)
        self.unread: dict[tuple[str, bool, bool, bool], int] = {}  # sessions in a row that left a long prompt unread

    def seed_costs(self, pass_seconds: Sequence[float], context_tokens: int) -> None:
        """Start the pass cost model from a verifier's own timings (ModelInfo.pass_seconds), once,
        before any round has taught it (pass_cost.py, PassCostModel.seed)."""
        if not self.costs_seeded and self.costs.observations == 0 and pass_seconds:
            self.costs.seed(pass_seconds, context_tokens)
            self.costs_seeded = True

    def busy(self) -> bool:
        """Another generation of this process is under way, or the last pass any of its sessions
        heard of held several rounds or served several sessions."""
        price = self.last_price
        return self.open_sessions > 1 or (price is not None and max(price.rounds, price.open_sessions) >= 2)

    def predictor(self, drafter: str, greedy: bool = True, race: bool = False, partial: bool = False) -> AcceptancePredictor:
        """The acceptance predictor of `drafter`'s drafts under greedy verification, speculative
        sampling, or (`race`) the exponential race; `partial`: in sessions whose prompt the
        drafter reads only the end of."""
        return self.predictors.setdefault((drafter, greedy, race, partial), AcceptancePredictor())

    def drafter_acceptance(self, drafter: str, greedy: bool = True, race: bool = False, partial: bool = False) -> SessionAcceptance:
        """The mean acceptance of `drafter`'s drafts under greedy verification, speculative
        sampling, or (`race`) the exponential race; `partial`: in sessions whose prompt the
        drafter reads only the end of."""
        key = (drafter, greedy, race, partial)
        return self.mean_acceptance.setdefault(key, SessionAcceptance(prior=PRIOR_ACCEPTANCE.get(drafter, 0.5), rate=0.05))


class SessionPolicy:
    """One generation's policy: `choose` cuts each round's full-depth draft, `observe` learns
    from the verdict on what was sent."""

    def __init__(
        self, name: str, drafter: str, state: PolicyState, prompt_tokens: int = 0, greedy: bool = True, max_new_tokens: int = 0,
        race: bool = False, partial_prompt: bool = False,
    ) -> None:
        """prompt_tokens: the prompt's length, which the first round's pass scores too; greedy: the
        session's verification (else speculative sampling, or with `race` the exponential race);
        max_new_tokens: the session's limit (0: unknown; a model's read of the prompt is then
        priced against one round); partial_prompt: the drafter reads only the end of the prompt
        (its window), so its drafts are learned apart (module docstring)."""
        if name not in POLICY_NAMES:
            raise ValueError(f"unknown draft policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
        self.name = name
        self.drafter = drafter
        self.greedy = greedy
        self.race = race and not greedy
        self.partial_prompt = partial_prompt
        self.state = state
        self.session = SessionAcceptance(prior=state.drafter_acceptance(*self.kind()).alpha)
        # The copy drafts of a hybrid session: their own rate and predictor (module docstring).
        self.copy_session = SessionAcceptance(prior=state.drafter_acceptance(*self.kind(copied=True)).alpha)
        self.load = 0  # rounds ahead of our last round in the verifier
        self.price: LoadPrice | None = None  # the pass of our last verdict
        self.declined = 0  # rounds in a row that sent nothing although there was a draft
        self.prompt_tokens = prompt_tokens
        self.rounds = 0  # verdicts observed
        self.max_new_tokens = max_new_tokens
        self.emitted = 0  # tokens the verdicts emitted so far
        self.probe_after = PROBE_AFTER
        self.probing = False  # the round in flight is a probe
        self.prompt_unread = False  # read_prompt said no: a probe pays the whole read

    def kind(self, copied: bool = False) -> tuple[str, bool, bool, bool]:
        """The key of PolicyState's learned acceptance for this session's drafts (a hybrid
        session's copy drafts with `copied`, which read the whole context)."""
        if copied:
            return COPY, self.greedy, self.race, False
        return self.drafter, self.greedy, self.race, self.partial_prompt

    def cost(self) -> RelativeCost:
        """A round's cost in plain rounds (module docstring, "Load")."""
        price = self.load_price()
        if self.prefill_round():
            # The first pass scores the prompt as well (the prefill): drafted nodes add t_node
            # each to a pass of prefill_seconds(), and no fixed jump.
            return RelativeCost(self.state.costs.node_seconds() / self.prefill_seconds(), 0.0)
        if price is not None and price.batched:
            return price.relative()
        if price is not None and price.rounds >= 1:  # a lone pass: nothing queued behind it
            return self.state.costs.relative(self.context())
        return self.state.costs.relative(self.context()).scaled(1.0 + self.state.load_weight * self.load)

    def context(self) -> int:
        """The tokens in the session's verifier cache before its next round: prompt and emitted."""
        return self.prompt_tokens + self.emitted

    def prefill_round(self) -> bool:
        """The next round is the first, alone in its pass: the pass that reads the prompt."""
        price = self.load_price()
        return self.rounds == 0 and self.prompt_tokens > 1 and not (price is not None and price.batched)

    def prefill_seconds(self) -> float:
        """The first pass without drafts: t_plain + t_node (prompt - 1) seconds."""
        return self.state.costs.plain(1) + self.state.costs.node_seconds() * (self.prompt_tokens - 1)

    def read_share(self, max_depth: int) -> float:
        """The share of a model drafter's one-time read of the prompt that the next round pays:
        1 / the rounds the session has left at full depth (module docstring, "Drafting cost")."""
        if not self.max_new_tokens:
            return 1.0
        rounds = (self.max_new_tokens - self.emitted) / expected_tokens(self.session.alpha, max_depth)
        return 1.0 / max(1.0, rounds)

    def catch_up_cost(self, catch_up_seconds: float, reads_prompt: bool, max_depth: int) -> float:
        """What a model drafter's first step costs this round beyond a step, in step_cost's units:
        the tokens it catches up on, or with reads_prompt this round's read_share of the prompt."""
        return self.step_cost(catch_up_seconds) * (self.read_share(max_depth) if reads_prompt else 1.0)

    def step_cost(self, step_seconds: float) -> float:
        """One model-drafter step of `step_seconds` in units of the next round's pass without
        drafts (Leviathan's c): the plain round's share of the pass our next round will likely
        share, the first pass (the prefill), or a lone plain pass."""
        price = self.load_price()
        if price is not None and price.batched:
            return step_seconds / price.plain_share()
        return step_seconds / (self.prefill_seconds() if self.prefill_round() else self.state.costs.plain(self.context()))

    def may_draft(self) -> bool:
        """False when this policy will send an empty round whatever the drafter proposes: it
        prices nodes, and one costs at least a plain round (c >= 1), so no draft can pay."""
        price = self.load_price()
        if self.name not in ("leviathan", "auto") or price is None or not price.batched:
            return True
        return price.node_cost() < 1.0

    def load_price(self) -> LoadPrice | None:
        """The pass our next round will likely share. Its size: the open sessions our last verdict
        (or, before our first, the process's last) reported, at least that pass's rounds. Its
        per-round cost: from our last pass if it held several rounds, else from the latest that
        did of any session (a prompt's prefill runs alone, but the next round lands in the busy
        verifier's batches)."""
        latest = self.price if self.price is not None else self.state.last_price
        if latest is None or max(latest.rounds, latest.open_sessions) < 2:
            return latest
        base = latest if latest.rounds >= 2 else (self.state.last_multi or latest)
        return LoadPrice(base.rounds, base.seconds, base.rows, base.row_seconds, max(latest.open_sessions, latest.rounds))

    def depth(self, draft: Draft, max_depth: int, max_nodes: int, step_seconds: float = 0.0, copied: bool = False) -> int:
        """The depth this policy sends of `draft` (drafted at most max_depth deep, its primary
        path by a model drafter at `step_seconds` a step; 0 for a free drafter; copied: a hybrid
        session's copy draft)."""
        path = primary_path(draft)
        if self.name == "fixed" or not path:
            return max_depth
        if self.name == "copy-confidence":
            return min(max_depth, draft.match_lengths[path[0]]) if draft.match_lengths else max_depth
        if self.name == "specdec++":
            return threshold_depth(self.predict(draft, path, copied), self.threshold())
        gains, costs = self._gains_and_costs(draft, path, max_depth, max_nodes, step_seconds, copied)
        if self.probe_due():
            self.probing = True
            return 1 + best_depth(gains[1:], costs[1:])
        return best_depth(gains, costs)

    def _gains_and_costs(
        self, draft: Draft, path: Sequence[int], max_depth: int, max_nodes: int, step_seconds: float, copied: bool
    ) -> tuple[list[float], list[float]]:
        """E[tokens emitted] and the round's cost in plain rounds, per depth 0..len(path) (capped
        at max_depth), for `leviathan` and `auto` (module docstring)."""
        cost = self.cost()
        drafted = self.step_cost(step_seconds) * len(path)  # sunk, but part of this round's cost
        depths = range(min(len(path), max_depth) + 1)
        costs = [cost.of(min(scaled_nodes(d, max_depth, max_nodes), nodes_within(draft, d))) + drafted for d in depths]
        if self.name == "leviathan":
            alpha = (self.copy_session if copied else self.session).alpha
            return [expected_tokens(alpha, d) for d in depths], costs
        return list(np.cumsum(chain_acceptance(self.predict(draft, path, copied))))[: len(costs)], costs

    def send_copy(
        self, copy_draft: Draft, max_depth: int, max_nodes: int, step_seconds: float | None, catch_up_seconds: float = 0.0,
        reads_prompt: bool = False,
    ) -> bool:
        """Whether a hybrid session sends the copy drafter's draft this round rather than drafting
        with its model (module docstring, "Copies beside a model drafter"). The model's steps take
        `step_seconds` each, its first `catch_up_seconds` more (reads_prompt: the prompt's read,
        spread over the session's rounds); None: it cannot draft this round (it reads the prompt
        meanwhile), so the copy draft is weighed against plain decoding."""
        path = primary_path(copy_draft)
        if not path:
            return False
        if self.name != "auto":
            return True
        gains, costs = self._gains_and_costs(copy_draft, path, max_depth, max_nodes, 0.0, copied=True)
        copy_rate = max(g / c for g, c in zip(gains[1:], costs[1:]))
        cost = self.cost()
        if step_seconds is None:
            return copy_rate > 1.0 / cost.of(0)
        step, first = self.step_cost(step_seconds), self.catch_up_cost(catch_up_seconds, reads_prompt, max_depth)
        return copy_rate > max(self.chain_rates(cost, step, first, max_depth, max_nodes))

    def chain_rates(self, cost: RelativeCost, step: float, first: float, max_depth: int, max_nodes: int) -> list[float]:
        """Leviathan's expected tokens per unit of cost of a model drafter's chain of k = 0..max_depth
        tokens at the session's rate: the round's `cost`, `step` per token and, for k >= 1,
        `first` (the first step's extra), in plain rounds."""
        return [
            expected_tokens(self.session.alpha, k) / (cost.of(scaled_nodes(k, max_depth, max_nodes)) + (step * k + first) * (k > 0))
            for k in range(max_depth + 1)
        ]

    def read_prompt(self, step_seconds: float, read_seconds: float, max_depth: int, max_nodes: int) -> bool:
        """Whether a model drafter (steps of `step_seconds`) should read a long prompt beside the
        verifier's prefill (`read_seconds` beyond a step; module docstring, "Prompts longer than
        the drafter's window"): its best chain at the session's rate, in a lone round after the
        first, with the read spread over the session's rounds (read_share), emits more tokens per
        unit of cost than plain decoding; or READ_AFTER_UNREAD sessions of its kind in a row
        left theirs unread. Counts the sessions that do not read."""
        key, plain = self.kind(), self.state.costs.plain(self.context())
        first = read_seconds / plain * self.read_share(max_depth)
        rates = self.chain_rates(self.state.costs.relative(self.context()), step_seconds / plain, first, max_depth, max_nodes)
        if max(rates[1:], default=0.0) > rates[0] or self.state.unread.get(key, 0) >= READ_AFTER_UNREAD:
            self.state.unread[key] = 0
            return True
        self.state.unread[key] = self.state.unread.get(key, 0) + 1
        self.prompt_unread = True
        return False

    def probe_due(self) -> bool:
        """A pricing policy has declined PROBE_AFTER (with backoff) rounds in a row: send the best
        depth of at least 1. Not in a batched pass, where a probe pads every round of it; a
        session that declines under load probes once the load is gone."""
        price = self.load_price()
        return self.declined >= self.probe_after and not (price is not None and price.batched)

    def threshold(self) -> float:
        """specdec++'s stop threshold, divided by 1 + load_weight x the rounds queued ahead."""
        return self.state.stop_threshold / (1.0 + self.state.load_weight * self.load)

    def keep_drafting(
        self, chain: Draft, max_depth: int, max_nodes: int, step_seconds: float, catch_up_seconds: float = 0.0,
        reads_prompt: bool = False,
    ) -> bool:
        """Whether a model drafter that has drafted `chain` (the first j tokens of a chain, j >= 0;
        a step takes `step_seconds`, and the first one catch_up_seconds more, which with
        reads_prompt is the prompt's one-time read) should pay for token j + 1 of a draft at most
        max_depth deep with max_nodes nodes (module docstring, "Drafting cost")."""
        j = len(chain)
        if j >= max_depth:
            return False
        if self.name in ("fixed", "copy-confidence"):
            return True
        predicted = self.predict(chain, range(j)) if j else np.zeros(0)
        if self.name == "specdec++":
            return j == 0 or 1.0 - float(np.prod(predicted)) <= self.threshold()
        step = self.step_cost(step_seconds)
        # paid by any draft (sunk once j > 0)
        first = self.catch_up_cost(catch_up_seconds, reads_prompt, max_depth) if j == 0 else 0.0
        # No probe that costs more than a plain round; nor one that reads a prompt left unread
        # because drafting would not pay: the read would not be shared.
        whole = self.step_cost(catch_up_seconds) if reads_prompt and self.prompt_unread else first
        if self.probe_due() and j == 0 and whole < 1.0:
            return True
        cost = self.cost()
        if self.name == "leviathan":
            costs = [cost.of(scaled_nodes(k, max_depth, max_nodes)) + step * k + first * (k > 0) for k in range(max_depth + 1)]
            return j < best_depth([expected_tokens(self.session.alpha, k) for k in range(max_depth + 1)], costs)
        # auto: acceptance past the chain extrapolated (module docstring, "Drafting cost")
        survive = list(chain_acceptance(predicted))
        following = float(predicted[-1]) if j and self.greedy else self.session.alpha
        while len(survive) <= max_depth:
            survive.append(survive[-1] * following)
        gains = np.cumsum(survive)

        def rate(depth: int, steps: int) -> float:
            return float(gains[depth]) / (cost.of(scaled_nodes(depth, max_depth, max_nodes)) + step * steps + first * (steps > 0))

        return max(rate(e, e) for e in range(j + 1, max_depth + 1)) > max(rate(d, j) for d in range(j + 1))

    def predict(self, draft: Draft, nodes: Sequence[int], copied: bool = False) -> np.ndarray:
        session = self.copy_session if copied else self.session
        return self.state.predictor(*self.kind(copied)).predict(node_features(draft, nodes), session.alpha)

    def choose(self, draft: Draft, max_depth: int, max_nodes: int, step_seconds: float = 0.0, copied: bool = False) -> Draft:
        """`draft` cut to this policy's depth and the node budget scaled to it."""
        d = self.depth(draft, max_depth, max_nodes, step_seconds, copied)
        if d >= max(node_depths(draft), default=0) and len(draft) <= scaled_nodes(d, max_depth, max_nodes):
            return draft
        return cut(draft, d, scaled_nodes(d, max_depth, max_nodes))

    def observe(
        self, sent: Draft, acceptance_probs: Sequence[float], verify_seconds: float, queued_rounds: int, *,
        first_round: bool, had_draft: bool, price: LoadPrice | None = None, copied: bool = False, emitted: int = 0,
    ) -> None:
        """Learn from the verdict on `sent`: acceptance labels of its primary path, the pass's
        cost (not the first round's, which includes the prefill, nor a round that queued or
        shared its pass), and the verifier's load. had_draft: the drafter had proposed something
        this round; price: the verdict's description of its pass (None: not reported); copied:
        `sent` was a hybrid session's copy draft, whose labels teach the copy predictor; emitted:
        the tokens the round emitted."""
        context = self.context()  # what the pass found cached
        self.rounds += 1
        self.emitted += emitted
        self.load = max(0, queued_rounds)
        self.price = price if price is not None and price.rounds > 0 else None
        self.state.last_price = self.price
        if self.price is not None and self.price.rounds >= 2:
            self.state.last_multi = self.price
        if not first_round and queued_rounds == 0 and (self.price is None or self.price.rounds == 1):
            self.state.costs.observe(len(sent), verify_seconds, context)
        # The verifier may have cut the tree under load (verifier_svc/pass_width.py): the nodes
        # it kept, a prefix, are the ones with labels.
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
        """Label a hybrid session's copy draft that was not sent with the tokens the round emitted
        (module docstring, "Copies beside a model drafter"): node j of its primary path, while
        the path agrees with the emitted tokens and they reach it, is 1 if it equals the emitted
        token, else 0, and the labels stop there."""
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

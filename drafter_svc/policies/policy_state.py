"""What one drafter process learns across its sessions: acceptance per kind of draft, and the
verifier's pass costs and load. Pure, no locks: asyncio runs its users between awaits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from drafter_svc.acceptance_predictor import AcceptancePredictor, SessionAcceptance
from drafter_svc.pass_cost import PassCostModel
from drafter_svc.policies.load_price import LoadPrice

DEFAULT_STOP_THRESHOLD = 0.5  # the middle of SpecDec++'s grid {0.1, 0.3, 0.5, 0.7, 0.9}
DEFAULT_LOAD_WEIGHT = 1.0
# Where a drafter process's mean acceptance of each drafter starts, before any label: 0.5, but
# for the int8 copy of the target its measured rate (docs/design/draft-policy-rules.md). A
# session's own labels still move its rate within a few rounds.
PRIOR_ACCEPTANCE: dict[str, float] = {"onnx-quantized": 0.9, "hybrid": 0.9}


class LearnedKind(NamedTuple):
    """The key of what a process learns of acceptance. Greedy verification labels a token 1 when
    it is the target's argmax, speculative sampling min(1, p/q) (p itself for a copy), and the
    exponential race (`race`) accepts a sampled draft less often still (verifier_svc/acceptance.py,
    race_agreement): the same draft has a different rate under each, so each is learned apart.
    `partial`: a model drafter that reads only its window of a longer prompt."""

    drafter: str
    greedy: bool = True
    race: bool = False
    partial: bool = False


class PolicyState:
    """What one drafter process learns across sessions: an acceptance predictor per LearnedKind,
    the verifier's pass costs, and each kind's mean acceptance (from PRIOR_ACCEPTANCE on; where a
    session that stopped drafting relaxes to, so it tries again)."""

    def __init__(self, stop_threshold: float = DEFAULT_STOP_THRESHOLD, load_weight: float = DEFAULT_LOAD_WEIGHT) -> None:
        if not 0.0 <= stop_threshold <= 1.0:
            raise ValueError(f"stop_threshold must be in [0, 1], got {stop_threshold}")
        if load_weight < 0:
            raise ValueError(f"load_weight must be >= 0, got {load_weight}")
        self.stop_threshold = stop_threshold
        self.load_weight = load_weight
        self.costs = PassCostModel()
        self.costs_seeded = False
        self.predictors: dict[LearnedKind, AcceptancePredictor] = {}
        self.mean_acceptance: dict[LearnedKind, SessionAcceptance] = {}
        # The pass of the latest verdict any session got: a new session's first guess at the load
        # (with several verifiers, of whichever answered last), until its own first verdict.
        self.last_price: LoadPrice | None = None
        self.last_multi: LoadPrice | None = None  # the latest of those that held several rounds
        self.open_sessions = 0  # generations of this process under way (the servicer counts them)
        self.unread: dict[LearnedKind, int] = {}  # sessions in a row that left a long prompt unread

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
        """The acceptance predictor of `drafter`'s drafts of this kind (LearnedKind)."""
        return self.predictors.setdefault(LearnedKind(drafter, greedy, race, partial), AcceptancePredictor())

    def drafter_acceptance(self, drafter: str, greedy: bool = True, race: bool = False, partial: bool = False) -> SessionAcceptance:
        """The mean acceptance of `drafter`'s drafts of this kind (LearnedKind)."""
        key = LearnedKind(drafter, greedy, race, partial)
        return self.mean_acceptance.setdefault(key, SessionAcceptance(prior=PRIOR_ACCEPTANCE.get(drafter, 0.5), rate=0.05))

"""What one drafter process learns across its sessions: acceptance per kind of draft, and the
latest round price and load a verifier reported. Pure, no locks: asyncio runs its users between
awaits."""

from __future__ import annotations

from typing import NamedTuple

from drafter_svc.acceptance_predictor import AcceptancePredictor
from specdec.acceptance_rate import AcceptanceRate
from specdec.round_price import RoundPrice

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
    the latest verdict's price and load, and each kind's mean acceptance (from PRIOR_ACCEPTANCE
    on; where a session that stopped drafting relaxes to, so it tries again)."""

    def __init__(self, stop_threshold: float = DEFAULT_STOP_THRESHOLD, load_weight: float = DEFAULT_LOAD_WEIGHT) -> None:
        if not 0.0 <= stop_threshold <= 1.0:
            raise ValueError(f"stop_threshold must be in [0, 1], got {stop_threshold}")
        if load_weight < 0:
            raise ValueError(f"load_weight must be >= 0, got {load_weight}")
        self.stop_threshold = stop_threshold
        self.load_weight = load_weight
        self.predictors: dict[LearnedKind, AcceptancePredictor] = {}
        self.mean_acceptance: dict[LearnedKind, AcceptanceRate] = {}
        # The price and the verifier's open sessions of the latest verdict any session got (with
        # several verifiers, of whichever answered last): a new session's price where its
        # verifier gave none.
        self.last_price = RoundPrice()
        self.last_open_sessions = 0
        self.open_sessions = 0  # generations of this process under way (the servicer counts them)
        self.unread: dict[LearnedKind, int] = {}  # sessions in a row that left a long prompt unread

    def busy(self) -> bool:
        """Another generation of this process is under way, or the latest verdict any of its
        sessions got said the verifier serves several sessions."""
        return self.open_sessions > 1 or self.last_open_sessions >= 2

    def predictor(self, drafter: str, greedy: bool = True, race: bool = False, partial: bool = False) -> AcceptancePredictor:
        """The acceptance predictor of `drafter`'s drafts of this kind (LearnedKind)."""
        return self.predictors.setdefault(LearnedKind(drafter, greedy, race, partial), AcceptancePredictor())

    def drafter_acceptance(self, drafter: str, greedy: bool = True, race: bool = False, partial: bool = False) -> AcceptanceRate:
        """The mean acceptance of `drafter`'s drafts of this kind (LearnedKind)."""
        key = LearnedKind(drafter, greedy, race, partial)
        return self.mean_acceptance.setdefault(key, AcceptanceRate(prior=PRIOR_ACCEPTANCE.get(drafter, 0.5), rate=0.05))

"""An online predictor of each drafted token's acceptance probability, learned while serving.

SpecDec++ (Huang et al., 2024, section 3) stops drafting when the predicted probability that some
drafted token gets rejected, 1 - prod_i P(Y_i accepted | Y_<i accepted), exceeds a threshold. It
trains an acceptance head offline on generated data; we have no offline data and learn online
instead: every verdict returns min(1, p(x)/q(x)) for every drafted node x, given its path, so each
round labels every node we sent (a deterministic drafter's q is a point mass, so the label is
p(x) itself; under greedy verification it is 1 if x is the target's argmax, else 0).

The model is a logistic regression, trained by one SGD step on the soft-label binary
cross-entropy per round, each node's term weighted by the probability that its path was accepted
(the product of the labels before it: a node past a rejection is not a sample of the
conditional; `AcceptancePredictor.update`):

    logit P(accept node) = w_session * logit(alpha_session) + w . features(node)

alpha_session is the session's running acceptance rate (specdec/acceptance_rate.py, over the
labels it has seen), so the prediction starts as that rate (w_session = 1, w = 0) and follows a
session's own difficulty within a few rounds, while the shared weights learn, across all
sessions of the drafter process, how acceptance falls with the position in the draft and rises
with the drafter's evidence (the length of the matched context, an n-gram's frequency, q of the
token and its entropy for a stochastic drafter, the model's probability of its token for a greedy
one).

Every feature but the bias is 0 for the common case, the first token of a point-mass draft
(position 0, q = 1, entropy 0, no confidence given): an input that is constant 1 for every
point-mass draft would be a second bias, and SGD would move the total bias at a multiple of the
learning rate (three such inputs once tripled it, and the bias then swamped the session rate).

Shared state: one predictor per drafter kind per process, and per kind of verification (greedy
labels and sampled ones differ: policies.policy_state.LearnedKind); numpy updates between awaits, so
concurrent asyncio sessions never see a half-written weight vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from drafter_svc.draft_tree import node_depths
from drafter_svc.draft import Draft

FEATURES: tuple[str, ...] = (
    "bias",
    "position",  # (depth in the draft - 1) / 8: 0 for the first token
    "match_length",  # context tokens the prediction rests on, min(n, 16) / 16 (0 when unknown)
    "doubt",  # 1 - the drafter's own estimate (n-gram frequency, a greedy model's probability); 0 when unknown
    "q_missing",  # 1 - q of the drafted token (0 for a point mass)
    "q_entropy",  # entropy of q in nats / log(16) (0 for a point mass)
)
ALPHA_CLIP = 0.02  # logit(alpha_session) is taken of alpha clipped to [0.02, 0.98]


def node_features(draft: Draft, nodes: Sequence[int]) -> np.ndarray:
    """[len(nodes), len(FEATURES)] features of the given nodes, from what the drafter knows."""
    depths = node_depths(draft)
    rows = []
    for i in nodes:
        q = draft.q_probs[i][draft.q_token_ids[i].index(draft.token_ids[i])]
        entropy = draft.q_entropies[i] if draft.q_entropies else q_entropy(np.asarray(draft.q_probs[i], dtype=np.float64))
        match = draft.match_lengths[i] if draft.match_lengths else 0
        confidence = draft.confidences[i] if draft.confidences else 1.0
        rows.append((1.0, (depths[i] - 1) / 8.0, min(match, 16) / 16.0, 1.0 - confidence, 1.0 - q, entropy / math.log(16)))
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


def q_entropy(probs: np.ndarray) -> float:
    """The entropy in nats of a sparse q's probabilities (zeros ignored), taken in float64: a
    float32 array and the list of its values give the same number to the last bit."""
    probs = probs.astype(np.float64)
    probs = probs[probs > 0]
    return -float(probs @ np.log(probs))


def _logit(alpha: float) -> float:
    a = min(max(alpha, ALPHA_CLIP), 1.0 - ALPHA_CLIP)
    return math.log(a / (1.0 - a))


class AcceptancePredictor:
    """P(node accepted | its path accepted), online logistic regression (module docstring)."""

    def __init__(self, learning_rate: float = 0.05, l2: float = 1e-4) -> None:
        self.learning_rate = learning_rate
        self.l2 = l2
        self.weights = np.zeros(len(FEATURES) + 1)  # [w_session, *w]
        self.weights[0] = 1.0
        self.updates = 0

    def _inputs(self, features: np.ndarray, alpha_session: float) -> np.ndarray:
        return np.hstack([np.full((features.shape[0], 1), _logit(alpha_session)), features])

    def predict(self, features: np.ndarray, alpha_session: float) -> np.ndarray:
        """[n] predicted acceptance probabilities of n nodes with the given features."""
        z = self._inputs(features, alpha_session) @ self.weights
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def update(self, features: np.ndarray, acceptance_probs: Sequence[float], alpha_session: float) -> None:
        """One SGD step on the binary cross-entropy against the verifier's soft labels (min(1, p/q),
        or the race's) of a path's nodes, in order, each weighted by the probability that the
        path before it was accepted, the product of the labels before it (averaged over the
        path's nodes). The verifier labels every node, also past a rejection, but the model is of
        P(node accepted | its path accepted), and acceptance runs in spans: a node past a
        rejected one sits in a hard span more often (MT-bench and QA at temperature 0, fixed
        6-chains: 0.87 of rounds accepted position 4 and 0.84 position 5, so given position 4,
        position 5 was accepted 0.97 of the time)."""
        if features.shape[0] == 0:
            return
        x = self._inputs(features, alpha_session)
        labels = np.clip(np.asarray(acceptance_probs, dtype=np.float64), 0.0, 1.0)
        reached = chain_acceptance(labels)[:-1]
        predicted = 1.0 / (1.0 + np.exp(-np.clip(x @ self.weights, -30, 30)))
        gradient = x.T @ (reached * (predicted - labels)) / len(labels) + self.l2 * self.weights
        self.weights -= self.learning_rate * gradient
        self.updates += 1


def chain_acceptance(predicted: Sequence[float]) -> np.ndarray:
    """[K + 1] P(the first k tokens of a chain are all accepted), k = 0..K: the cumulative
    product of per-token conditional acceptance probabilities."""
    return np.concatenate([[1.0], np.cumprod(np.asarray(predicted, dtype=np.float64))])

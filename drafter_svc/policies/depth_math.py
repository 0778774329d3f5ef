"""The arithmetic of draft lengths: expected tokens per round, the best depth by tokens per unit
of cost, Leviathan's optimal K, SpecDec++'s stopping rule, and a cut's node budget."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from drafter_svc.acceptance_predictor import chain_acceptance
from specdec.round_price import RoundPrice


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one round of k i.i.d. drafts emits on average: sum_{j=0..k} alpha^j, which is
    (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al., equation 1)."""
    return float(sum(alpha**j for j in range(k + 1)))


def best_depth(gains: Sequence[float], costs: Sequence[float]) -> int:
    """argmax_d gains[d] / costs[d]; ties go to the shorter draft."""
    rates = [g / c for g, c in zip(gains, costs)]
    return int(np.argmax(np.asarray(rates) - 1e-12 * np.arange(len(rates))))


def leviathan_depth(alpha: float, max_depth: int, cost: RoundPrice) -> int:
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

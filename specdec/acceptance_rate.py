"""A running acceptance rate: the one estimator of how often drafted tokens are accepted.

Labels are the verifier's acceptance probabilities (min(1, p/q) of a node, 1/0 under greedy
verification) of a draft's primary path. Each update moves the rate towards the labels' mean by
1 - (1 - rate)^n for n labels, so a round with more labels is more evidence. Torch-free: the
drafter keeps one per session and one per kind of draft per process
(drafter_svc/policies/policy_state.py).
"""

from __future__ import annotations

from collections.abc import Sequence


class AcceptanceRate:
    """An exponential moving average of acceptance labels, starting at `prior`."""

    def __init__(self, prior: float = 0.5, rate: float = 0.3) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        self.alpha = prior
        self.rate = rate

    def update(self, labels: Sequence[float]) -> None:
        """Move alpha towards the mean of `labels` (each clipped to [0, 1]) by 1 - (1 - rate)^n."""
        if len(labels):
            mean = sum(min(1.0, max(0.0, float(label))) for label in labels) / len(labels)
            self.alpha += (1.0 - (1.0 - self.rate) ** len(labels)) * (mean - self.alpha)

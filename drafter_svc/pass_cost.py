"""What a target pass costs as a function of the number of drafted nodes it verifies, estimated
online from the verify_seconds the verifier returns with every verdict.

Leviathan et al. (2023), section 3.2, price a round of K drafts at (K c + 1) target passes, c being
the cost of one draft-model step relative to one target pass. Our drafters cost nothing; what grows
with K is the target pass itself: on a CPU a pass over more tokens takes longer (SmolLM2-135M on
this project's 2 cores: ~57 ms for 1 token, ~75 ms for 5, ~86 ms for 9, ~98 ms for 17; short
passes are padded to a faster size: verifier_svc/pass_sizes.py). The model, in seconds, for a round of n drafted nodes:

    t(0) = t_plain                      (one plain decoding step)
    t(n) = t_fixed + t_node * n,  n >= 1

fitted by exponentially weighted least squares (recent rounds count more; prior pseudo-rounds
from the figures above, which never decay, keep the fit defined when recent rounds all have the
same size). A shared CPU makes single passes several times slower now and then, so each
observation is clipped to [1/2, 2] times the current estimate before it enters the fit: a real,
lasting change still moves the estimate within tens of rounds, a burst of contention does not
make drafting look ruinous (after which a policy would stop drafting and never re-measure). In Leviathan's units (one plain pass = 1)
a round of n >= 1 nodes costs 1 + c0 + c n with c = t_node / t_plain, the per-node cost ratio, and
c0 = (t_fixed - t_plain) / t_plain, the jump from a plain pass to any pass with drafts (c0 = 0 is
Leviathan's own model).

Only rounds that did not queue behind other sessions' rounds are used (the verifier reports how
many were ahead), and never a session's first round, which includes the prompt's prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

# Prior figures (seconds), from the measurements quoted above.
PRIOR_PLAIN = 0.057
PRIOR_FIXED = 0.068
PRIOR_PER_NODE = 0.0019


@dataclass(frozen=True)
class RelativeCost:
    """A round's cost in plain target passes: 1 for no drafts, else 1 + overhead + per_node * n."""

    per_node: float  # c
    overhead: float  # c0

    def of(self, nodes: int) -> float:
        return 1.0 if nodes == 0 else 1.0 + self.overhead + self.per_node * nodes

    def scaled(self, factor: float) -> RelativeCost:
        return RelativeCost(self.per_node * factor, self.overhead * factor)


class PassCostModel:
    """Running estimate of t(n) (module docstring). One per drafter process: it describes the
    verifier's hardware, not a session."""

    def __init__(
        self,
        plain: float = PRIOR_PLAIN,
        fixed: float = PRIOR_FIXED,
        per_node: float = PRIOR_PER_NODE,
        decay: float = 0.99,
        prior_weight: float = 10.0,
    ) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self._prior_plain = (prior_weight, prior_weight * plain)
        self._plain = (0.0, 0.0)  # decayed [weight, weighted seconds] of observed plain passes
        # Weighted sums for the line through rounds with drafts: w, w n, w t, w n^2, w n t.
        self._prior_line = [0.0] * 5
        for n in (1, 16):
            _add_point(self._prior_line, n, fixed + per_node * n, prior_weight)
        self._line = [0.0] * 5
        self.observations = 0

    def observe(self, nodes: int, seconds: float) -> None:
        """One round's pass: `nodes` drafted nodes verified in `seconds`."""
        if nodes < 0 or not seconds > 0:
            return
        self.observations += 1
        expected = self.seconds(nodes)
        seconds = min(max(seconds, expected / 2), expected * 2)
        if nodes == 0:
            self._plain = (self._plain[0] * self.decay + 1.0, self._plain[1] * self.decay + seconds)
        else:
            self._line = [v * self.decay for v in self._line]
            _add_point(self._line, nodes, seconds, 1.0)

    @property
    def plain(self) -> float:
        return (self._prior_plain[1] + self._plain[1]) / (self._prior_plain[0] + self._plain[0])

    def line(self) -> tuple[float, float]:
        """(t_fixed, t_node), the least-squares line through the rounds with drafts (t_node >= 0)."""
        w, sn, st, snn, snt = (a + b for a, b in zip(self._prior_line, self._line))
        variance = snn * w - sn * sn
        slope = max(0.0, (snt * w - sn * st) / variance) if variance > 1e-12 else 0.0
        return (st - slope * sn) / w, slope

    def seconds(self, nodes: int) -> float:
        fixed, per_node = self.line()
        return self.plain if nodes == 0 else fixed + per_node * nodes

    def relative(self) -> RelativeCost:
        fixed, per_node = self.line()
        plain = self.plain
        return RelativeCost(per_node=per_node / plain, overhead=max(0.0, (fixed - plain) / plain))


def _add_point(sums: list[float], n: int, seconds: float, weight: float) -> None:
    for i, value in enumerate((1.0, n, seconds, n * n, n * seconds)):
        sums[i] += weight * value

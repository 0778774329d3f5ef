"""What a target pass costs as a function of the number of drafted nodes it verifies and of the
session's context, estimated online from the verify_seconds the verifier returns with every
verdict.

Leviathan et al. (2023), section 3.2, price a round of K drafts at (K c + 1) target passes, c being
the cost of one draft-model step relative to one target pass. Our drafters cost little or
nothing; what grows with K is the target pass itself, and on a CPU not steadily. SmolLM2-135M on
this project's 2 cores, lone unpadded passes (tokens = the pending token + drafted nodes), median
of 9, after a cache of 128, 800 and 1,500 tokens:

    tokens       1     2     3     4     5     6     7     8     9    12
    128 cached  59    92   112    89    76    77   100    77    83    83   ms
    800         61    93   114    85    77    84   104    83    90    91
    1,500       62    98   119    91    82    92   109    91    95   100

The verifier pads each pass to the fastest size at or above it that it timed at start
(verifier_svc/pass_sizes.py; in one benchmark's verifier [1, 5, 5, 5, 5, 8, 8, 8, 9, 12, ...]),
so what a round of n nodes costs is a staircase: there, 1-4 nodes ran as 5 tokens (72 ms), 5-7
as 8 (83 ms). A line through n misses the steps, and the jump from a plain pass to any pass with
drafts. The cache's share grows with the tokens of the pass (each one's attention reads the
cache): 3 ms from 128 to 1,500 cached for a plain pass, 17 ms for 12 tokens. The model, in
seconds, for a round of n drafted nodes after a context of L tokens:

    t(0, L) = t_plain + g L                                          (one plain decoding step)
    t(n, L) = t_plain + g L + t_jump + (t_node + h L) n + r(n),      n >= 1

t_plain, g, t_jump, t_node and h are fitted jointly by exponentially weighted least squares
(recent rounds count more; prior pseudo-rounds, which never decay, keep the fit defined when
recent rounds all have one size and one context); r(n), the steps, is the decayed mean of the
rounds of n nodes' residuals from that line, shrunk by RESIDUAL_PRIOR_WEIGHT pseudo-rounds towards
its prior, so a size seen rarely, or long ago, is priced by the prior. The prior: the verifier's
own timings where it reports them (ModelInfo.pass_seconds, `seed`: its plain pass, and each
size's residual from the line through them, the staircase), else figures measured on this CPU
(a line, no steps).
A shared CPU makes single passes several times slower now and then, so each observation is
clipped to [1/LINE_CLIP, LINE_CLIP] times the line before it enters the line's fit, and each
residual to RESIDUAL_CLIP times the line: a real, lasting change moves the estimate within tens
of rounds (a 2x slower machine: 20-30), a burst of contention does not make drafting look
ruinous. The steps between lone passes are 10-20% of a pass, but in service some sizes may cost
lastingly more than timed lone, which the residual must be free to learn: in a traced T=1 run,
passes with 4 drafted nodes took 46-55 ms against 35-40 lone (plain passes as timed), and a
clip of a quarter of the line kept r(n) from learning it (2-3 nodes priced 5-9 ms under what
they took). Any other process on the same cores can cause such an excess (that one was numpy's
BLAS worker, which specdec/cli.py keeps to one thread); docs/design/pass-cost.md.

In Leviathan's units (one plain pass at the same context = 1) a round of n >= 1 nodes costs
1 + c0 + c n + e(n): c = (t_node + h L) / t(0, L), the per-node cost ratio, c0 = t_jump / t(0, L),
the jump from a plain pass to any pass with drafts (c0 = 0 and e = 0 are Leviathan's own model),
and e(n) = r(n) / t(0, L).

Only rounds that did not queue behind other sessions' rounds are used (the verifier reports how
many were ahead), and never a session's first round, which includes the prompt's prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Prior figures (seconds), from an earlier measurement on this CPU: a plain pass and the line
# through passes with drafts at a PRIOR_CONTEXT-token cache; what each cached token adds to a plain
# pass, and to each drafted node (from the table above).
PRIOR_PLAIN = 0.057
PRIOR_FIXED = 0.068
PRIOR_PER_NODE = 0.0019
PRIOR_PER_CONTEXT = 3e-6
PRIOR_PER_NODE_CONTEXT = 1e-6
PRIOR_CONTEXT = 300
CONTEXT_UNIT = 1000.0  # the context regressor's unit, keeping the normal equations well conditioned
RESIDUAL_PRIOR_WEIGHT = 1.0  # pseudo-rounds of each size's prior residual (0 unless seeded) behind r(n)
RESIDUAL_CLIP = 0.5  # a round's residual enters r(n) clipped to +-this share of the line's seconds (docs/design/pass-cost.md)
LINE_CLIP = 1.5  # a round enters the line clipped to [1 / this, this] times the line


@dataclass(frozen=True)
class RelativeCost:
    """A round's cost in plain target passes: 1 for no drafts, else 1 + overhead + per_node * n
    + extra[n - 1] (no extra past the table's end), at least 1."""

    per_node: float  # c
    overhead: float  # c0
    extra: tuple[float, ...] = ()  # e(1), e(2), ...

    def of(self, nodes: int) -> float:
        if nodes == 0:
            return 1.0
        extra = self.extra[nodes - 1] if nodes <= len(self.extra) else 0.0
        return max(1.0, 1.0 + self.overhead + self.per_node * nodes + extra)

    def scaled(self, factor: float) -> RelativeCost:
        return RelativeCost(self.per_node * factor, self.overhead * factor, tuple(e * factor for e in self.extra))


class PassCostModel:
    """Running estimate of t(n, L) (module docstring). One per drafter process: it describes the
    verifier's hardware, not a session."""

    def __init__(
        self,
        plain: float = PRIOR_PLAIN,
        fixed: float = PRIOR_FIXED,
        per_node: float = PRIOR_PER_NODE,
        per_context: float = PRIOR_PER_CONTEXT,
        per_node_context: float = PRIOR_PER_NODE_CONTEXT,
        decay: float = 0.99,
        prior_weight: float = 4.0,
    ) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.prior_weight = prior_weight
        self._per_context = (per_context, per_node_context)
        # Weighted sums x x^T and x t over x = [1, drafted, n, L, n L] (L in CONTEXT_UNITs).
        self._xx, self._xt = np.zeros((5, 5)), np.zeros(5)
        line = {n: plain if n == 0 else fixed + per_node * n for n in (0, 1, 16)}
        self._set_prior(line, PRIOR_CONTEXT)
        # Per node count: decayed [weight, weighted residual seconds] of the rounds of that size.
        self._residuals: dict[int, tuple[float, float]] = {}
        self.observations = 0

    def _set_prior(self, seconds: dict[int, float], context: int) -> None:
        """Prior pseudo-rounds: `seconds[n]` for n nodes after `context` tokens, and the same
        CONTEXT_UNIT tokens later as the per-context figures say; prior_weight / 2 at each
        context for the plain rounds, twice that for the others together. r(n)'s prior: each size's
        residual from the fitted line (0 for a line's points)."""
        self._prior_xx, self._prior_xt = np.zeros((5, 5)), np.zeros(5)
        per_context, per_node_context = self._per_context
        drafted = sum(1 for n in seconds if n > 0)
        for n, t in seconds.items():
            weight = self.prior_weight / 2 * (1 if n == 0 else 2 / drafted)
            for extra in (0, CONTEXT_UNIT):
                x = _regressors(n, context + int(extra))
                self._prior_xx += weight * np.outer(x, x)
                self._prior_xt += weight * (t + (per_context + per_node_context * n) * extra) * x
        self._fit = np.linalg.solve(self._prior_xx + self._xx, self._prior_xt + self._xt)
        self._residual_prior = {n: t - self.line_seconds(n, context) for n, t in seconds.items() if n > 0}

    def seed(self, pass_seconds: Sequence[float], context: int) -> None:
        """Start from the verifier's own timings (ModelInfo.pass_seconds: a lone pass over 1, 2, ...
        tokens, padded as it runs them, after `context` cached tokens) rather than this CPU's
        figures: its plain pass and its steps. The per-context figures are scaled by its plain
        pass over PRIOR_PLAIN (a faster device reads its cache faster too)."""
        if not pass_seconds or not all(t > 0 for t in pass_seconds) or context < 0:
            return
        scale = pass_seconds[0] / PRIOR_PLAIN
        self._per_context = (PRIOR_PER_CONTEXT * scale, PRIOR_PER_NODE_CONTEXT * scale)
        self._set_prior(dict(enumerate(pass_seconds)), context)

    def observe(self, nodes: int, seconds: float, context: int = PRIOR_CONTEXT) -> None:
        """One round's pass: `nodes` drafted nodes verified in `seconds` after `context` tokens."""
        if nodes < 0 or not seconds > 0:
            return
        self.observations += 1
        line = self.line_seconds(nodes, context)
        x = _regressors(nodes, context)
        self._xx = self.decay * self._xx + np.outer(x, x)
        self._xt = self.decay * self._xt + min(max(seconds, line / LINE_CLIP), line * LINE_CLIP) * x
        self._fit = np.linalg.solve(self._prior_xx + self._xx, self._prior_xt + self._xt)
        self._residuals = {n: (w * self.decay, r * self.decay) for n, (w, r) in self._residuals.items()}
        if nodes > 0:
            weight, total = self._residuals.get(nodes, (0.0, 0.0))
            bound = RESIDUAL_CLIP * line
            residual = min(max(seconds - self.line_seconds(nodes, context), -bound), bound)
            self._residuals[nodes] = (weight + 1.0, total + residual)

    def line(self, context: int = PRIOR_CONTEXT) -> tuple[float, float]:
        """(t_fixed, t_node) after `context` tokens: the line through rounds with drafts."""
        return self.plain(context) + max(0.0, self._fit[1]), self.node_seconds(context)

    def plain(self, context: int = PRIOR_CONTEXT) -> float:
        """t(0, L): a plain decoding step's seconds after `context` tokens."""
        plain, _, _, per_context, _ = self._fit
        return max(1e-4, plain + per_context * context / CONTEXT_UNIT)

    def node_seconds(self, context: int = PRIOR_CONTEXT) -> float:
        """t_node + h L: one more drafted node's seconds after `context` tokens (>= 0)."""
        _, _, per_node, _, per_node_context = self._fit
        return max(0.0, per_node + per_node_context * context / CONTEXT_UNIT)

    def line_seconds(self, nodes: int, context: int = PRIOR_CONTEXT) -> float:
        """t(n, L) without the step structure r(n)."""
        if nodes == 0:
            return self.plain(context)
        fixed, per_node = self.line(context)
        return fixed + per_node * nodes

    def residual(self, nodes: int) -> float:
        """r(n): how much a round of n nodes costs beyond the line (module docstring)."""
        weight, total = self._residuals.get(nodes, (0.0, 0.0))
        return (total + RESIDUAL_PRIOR_WEIGHT * self._residual_prior.get(nodes, 0.0)) / (weight + RESIDUAL_PRIOR_WEIGHT)

    def seconds(self, nodes: int, context: int = PRIOR_CONTEXT) -> float:
        """t(n, L)."""
        return self.line_seconds(nodes, context) + (self.residual(nodes) if nodes else 0.0)

    def relative(self, context: int = PRIOR_CONTEXT) -> RelativeCost:
        """A round's cost in plain passes at this context (module docstring)."""
        plain = self.plain(context)
        sizes = max(max(self._residuals, default=0), max(self._residual_prior, default=0))
        extra = tuple(self.residual(n) / plain for n in range(1, sizes + 1))
        return RelativeCost(self.node_seconds(context) / plain, max(0.0, self._fit[1]) / plain, extra)


def _regressors(nodes: int, context: int) -> np.ndarray:
    return np.array([1.0, float(nodes > 0), float(nodes), context / CONTEXT_UNIT, nodes * context / CONTEXT_UNIT])

"""What a target pass costs this verifier, and the price of a session's next round.

The verifier alone fits what its passes cost and sees its batches, so it alone prices rounds
(specdec/round_price.py; docs/design/pass-cost.md). A decode pass over B rounds, padded to B x T
new-token rows, reading `slots` cached entries in all, is modelled as

    t = a + j [rows > 1] + m rows + k slots

a: what every pass pays (weights streamed, launches, the Python around it); j: the jump from a
one-row pass (matrix-vector products) to any wider one; m: one more row through every layer;
k: one more cached entry read by attention. Fitted by exponentially weighted least squares
(recent passes count more) over pseudo-passes that never decay: the lone passes of 1, 2, ...
tokens the verifier timed at start (`seed`), so the fit starts from this device and model, not
from figures in code. Each observed pass is clipped to [1 / CLIP, CLIP] times the fit's
prediction before it enters: a shared host runs single passes several times slower now and
then, and a burst of contention must not make drafting look ruinous, while a lasting change
moves the fit within tens of passes. Only decode passes are fitted (every round's pending tokens
at most DECODE_MAX_PENDING): a prompt's rows go through large matrix products, where a row costs
least.

Prices, in plain decoding passes of the session's next round:

- alone (at most one session open, the round its pass's only one): plain = a + m + k L at the
  session's L cached tokens; a node costs m / plain, a round with nodes j / plain more; and, for
  as many nodes as the start-up timing reached, a table of what a lone round of each size costs
  (RoundPrice.round_costs): a CPU pads each size to one it timed fastest, so those times are a
  staircase (1-4 tokens alike, then a step) that a line prices wrong. The table starts as the
  start-up passes' times over the one-token pass's and learns in service: each lone decode
  pass of r tokens moves entry r - 1 towards its seconds over the fit's plain pass at the same
  cached length (clipped like the fit's passes), so a long context's wider passes, which cost
  more next to a plain pass than at start-up's short one, are priced as they run. Published
  non-decreasing (a round of more nodes never priced below a smaller one);
- sharing passes (S = max(B, open sessions) >= 2): the round's share of a pass of B rounds
  (the last pass that held several), plain = (a + j + m B + k B L) / B; a node pads every
  round of the next pass, about S of them, so it costs S m / plain, with no fixed overhead.

Pure: numpy only, no I/O; the scheduler's worker thread is the only writer, and readers see
either the old fit or the new one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specdec.round_price import RoundPrice

DECODE_MAX_PENDING = 16  # pending tokens of a round beyond which its pass counts as a prefill
CLIP = 1.5  # an observed pass enters the fit clipped to [1 / CLIP, CLIP] times its prediction
TABLE_DECAY = 0.9  # a lone round's table entry keeps this much of itself at each pass of its size
SLOT_UNIT = 1000.0  # the slots regressor's unit, keeping the normal equations well conditioned
RIDGE = 1e-6  # keeps the normal equations solvable where the seeds leave a term undetermined
# k is pulled towards 0 by this many pseudo-passes at SLOT_UNIT slots: the seeds, all at one
# context, cannot tell k from a, and passes at other contexts must show it.
SLOT_RIDGE = 1.0


class PassPriceModel:
    """Running fit of t = a + j [rows > 1] + m rows + k slots, and round prices from it."""

    def __init__(self, decay: float = 0.98, seed_weight: float = 4.0) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.seed_weight = seed_weight
        self._seed_xx, self._seed_xt = np.zeros((4, 4)), np.zeros(4)
        self._xx, self._xt = np.zeros((4, 4)), np.zeros(4)
        self._fit: np.ndarray | None = None
        self.seed_context = 0  # cached tokens before the seeded passes
        self.passes = 0  # observed passes
        self.shared_rounds = 0  # rounds of the last pass that held several (0: none yet)
        self.shared_slots = 0  # and the cached entries it read
        self._lone_costs: list[float] = []  # a lone round of 1, 2, ... nodes, in plain passes

    @property
    def fitted(self) -> bool:
        return self._fit is not None

    def seed(self, lone_seconds: Sequence[float], context: int) -> None:
        """Start from lone passes timed at start: lone_seconds[r - 1] for r new tokens (the
        pending token and r - 1 drafted nodes) after `context` cached tokens; seed_weight
        pseudo-passes in all, half of them the plain pass. Their ratios to the one-token pass,
        up to the first size not timed, start the lone round's table (module docstring)."""
        valid = [(r, t) for r, t in enumerate(lone_seconds, start=1) if t > 0]
        if not valid or valid[0][0] != 1:
            return
        timed = [t for _, t in valid[: next((i for i, (r, _) in enumerate(valid) if r != i + 1), len(valid))]]
        self._lone_costs = [t / timed[0] for t in timed[1:]]
        self._seed_xx, self._seed_xt = np.zeros((4, 4)), np.zeros(4)
        wider = max(1, len(valid) - 1)
        for rows, seconds in valid:
            weight = self.seed_weight / 2 * (1.0 if rows == 1 else 1.0 / wider)
            x = _regressors(rows, context)
            self._seed_xx += weight * np.outer(x, x)
            self._seed_xt += weight * seconds * x
        self.seed_context = context
        self._solve()

    def observe(self, rows: int, slots: int, seconds: float, rounds: int = 1) -> None:
        """One decode pass of `rounds` rounds: `rows` padded new-token rows over `slots` cached
        entries, in `seconds`."""
        if rows <= 0 or slots < 0 or not seconds > 0:
            return
        if self._fit is not None:
            if rounds == 1:
                self._learn_lone_cost(rows, slots, seconds)
            predicted = self.seconds(rows, slots)
            seconds = min(max(seconds, predicted / CLIP), predicted * CLIP)
        x = _regressors(rows, slots)
        self._xx = self.decay * self._xx + np.outer(x, x)
        self._xt = self.decay * self._xt + seconds * x
        self.passes += 1
        if rounds >= 2:
            self.shared_rounds, self.shared_slots = rounds, slots
        self._solve()

    def _learn_lone_cost(self, rows: int, slots: int, seconds: float) -> None:
        """Move the table's entry for a lone pass of `rows` tokens (rows - 1 nodes) towards its
        seconds over the fit's plain pass at `slots` cached entries, clipped like a fit's pass."""
        plain = self.seconds(1, slots)
        if not 2 <= rows <= len(self._lone_costs) + 1 or plain <= 0:
            return
        old = self._lone_costs[rows - 2]
        ratio = min(max(seconds / plain, old / CLIP), old * CLIP)
        self._lone_costs[rows - 2] = TABLE_DECAY * old + (1.0 - TABLE_DECAY) * ratio

    @property
    def lone_costs(self) -> tuple[float, ...]:
        """The lone round's table as published: entry n - 1 for n nodes, never below a smaller
        round's (module docstring)."""
        table: list[float] = []
        highest = 0.0
        for cost in self._lone_costs:
            highest = max(highest, cost)
            table.append(highest)
        return tuple(table)

    def _solve(self) -> None:
        """Least squares with j, m and k kept >= 0: a term the data would make negative (noisy
        timings: a wider pass measured faster) is dropped and the rest refitted, so the others
        still fit what was measured."""
        xx = self._seed_xx + self._xx
        scale = max(float(np.trace(xx)), 1e-12)
        a = xx + RIDGE * scale * np.eye(4) + np.diag([0.0, 0.0, 0.0, SLOT_RIDGE])
        b = self._seed_xt + self._xt
        free = [0, 1, 2, 3]
        while True:
            solution = np.linalg.solve(a[np.ix_(free, free)], b[free])
            negative = [i for i, v in zip(free, solution) if i > 0 and v < 0]
            if not negative:
                break
            free = [i for i in free if i not in negative]
        fit = np.zeros(4)
        fit[free] = solution
        self._fit = fit

    def terms(self) -> tuple[float, float, float, float]:
        """(a, j, m, k per slot) of the fit, none negative; zeros before any seed or pass."""
        if self._fit is None:
            return 0.0, 0.0, 0.0, 0.0
        a, j, m, k = (max(0.0, float(v)) for v in self._fit)
        return a, j, m, k / SLOT_UNIT

    @property
    def fixed_seconds(self) -> float:
        """a + j: what every pass of more than one row pays, whatever its shape."""
        a, j, _, _ = self.terms()
        return a + j

    def seconds(self, rows: int, slots: int) -> float:
        """The fit's seconds for a pass of `rows` rows over `slots` cached entries."""
        a, j, m, k = self.terms()
        return a + j * (rows > 1) + m * rows + k * slots

    def price(self, context: int, shared: int = 1) -> RoundPrice:
        """The price of a session's next round after `context` cached tokens, with `shared`
        rounds likely in its pass (module docstring); no price before any seed or pass."""
        if self._fit is None:
            return RoundPrice()
        a, j, m, k = self.terms()
        if shared <= 1:
            plain = a + m + k * context
            if plain <= 0:
                return RoundPrice()
            return RoundPrice(m / plain, j / plain, plain, self.lone_costs)
        rounds = self.shared_rounds or shared
        slots = self.shared_slots if self.shared_rounds else rounds * context
        share = (a + j + m * rounds + k * slots) / rounds
        if share <= 0:
            return RoundPrice()
        return RoundPrice(shared * m / share, 0.0, share)


def _regressors(rows: int, slots: int) -> np.ndarray:
    return np.array([1.0, float(rows > 1), float(rows), slots / SLOT_UNIT])

"""What a target pass costs this verifier, and the price of a session's next round.

The verifier alone fits what its passes cost and sees its batches, so it alone prices rounds
(specdec/round_price.py; docs/design/pass-cost.md). Two curves are fitted, one per kind of
pass, because a device may run them in different engines (on CPU, onnxruntime's lone passes
and torch's batched ones: a row costs ~1.4 ms in the first, 3-6 ms in the second at 2-8 rows
and ~1 ms at 16-32):

    lone pass (one round):           t = a + j [rows > 1] + m rows + k slots
    shared pass (B >= 2 rounds):     t = a_s + m_s rows + c_s log2(rows) + k_s slots

rows: the pass's new-token rows (a batched pass packs its rounds' rows: batched_pass.py);
slots: the cached entries its attention reads, summed over its rounds; a: what every pass pays
(weights streamed, launches, the Python around it); j: the jump from a one-row pass
(matrix-vector products) to any wider one; m: one more row through every layer; k: one more
cached entry read by attention; c_s: a batched pass's rows grow cheaper as the products widen.
Each curve is fitted by exponentially weighted least squares (recent passes count more) over
pseudo-passes timed at start (`seed`): lone passes of 1, 2, ... tokens, and batched passes of
2-32 rows (batched_pass_timing.py; where none were timed, the lone line's seconds stand in), so
the fits start from this device and model, not from figures in code. The seeds decay with every
pass their curve observes, as an observed pass does, down to SEED_FLOOR of their weight: a start
beside a busy neighbour times every pass several times slower, and seeds that kept their weight
would price the shapes service never shows (and, through the curve, the ones it does) from that
moment for the life of the process; at the floor they still price those shapes.
Each observed pass is clipped to [1 / CLIP, CLIP] times its curve's prediction before it
enters: a shared host runs single passes several times slower now and then, and a burst of
contention must not make drafting look ruinous, while a lasting change moves the fit within
tens of passes. Only decode passes are fitted (every round's pending tokens at most
DECODE_MAX_PENDING): a prompt's rows go through large matrix products, where a row costs least.

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
- sharing passes (S = max(B, open sessions) >= 2): the unit is the round's share of a pass of
  its B rounds without drafts (B and the slots of the last pass that held several), plain =
  t_s(B rows) / B; a node adds one packed row to a pass like the last one (R rows):
  (t_s(R + 1) - t_s(R)) / plain, with no fixed overhead.

Pure: numpy only, no I/O; the scheduler's worker thread is the only writer, and readers see
either the old fit or the new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specdec.round_price import RoundPrice

DECODE_MAX_PENDING = 16  # pending tokens of a round beyond which its pass counts as a prefill
CLIP = 1.5  # an observed pass enters the fit clipped to [1 / CLIP, CLIP] times its prediction
# The share of their weight the seed pseudo-passes keep however many passes are observed. Simulated
# (2026-11-29, docs/design/pass-cost.md): batched passes seeded at 5x their cost, then 1,000 passes
# of 2-8 rows at their cost, priced a pass of 8 rows at 2.6x its cost with seeds that never decay,
# at 1.1x with this floor.
SEED_FLOOR = 0.02
TABLE_DECAY = 0.9  # a lone round's table entry keeps this much of itself at each pass of its size
SLOT_UNIT = 1000.0  # the slots regressor's unit, keeping the normal equations well conditioned
RIDGE = 1e-6  # keeps the normal equations solvable where the seeds leave a term undetermined
# k is pulled towards 0 by this many pseudo-passes at SLOT_UNIT slots: the seeds, all at one
# context, cannot tell k from a, and passes at other contexts must show it.
SLOT_RIDGE = 1.0
# Where no batched pass was timed at start, the shared curve starts from the lone line's
# seconds at these rows (two rounds' slots).
STAND_IN_ROWS = (2, 4, 8, 16)

Regressors = Callable[[int, int], np.ndarray]


def lone_regressors(rows: int, slots: int) -> np.ndarray:
    return np.array([1.0, float(rows > 1), float(rows), slots / SLOT_UNIT])


def shared_regressors(rows: int, slots: int) -> np.ndarray:
    return np.array([1.0, float(rows), float(np.log2(rows)), slots / SLOT_UNIT])


class LineFit:
    """Seconds of a pass, linear in `regressors(rows, slots)` (the last one the slots): least
    squares over seed pseudo-passes and `decay`-weighted observed passes (the seeds decaying with
    them down to SEED_FLOOR of their weight), every term but the first kept >= 0."""

    def __init__(self, regressors: Regressors, decay: float) -> None:
        self.regressors = regressors
        self.decay = decay
        size = len(regressors(1, 0))
        self._seed_xx, self._seed_xt = np.zeros((size, size)), np.zeros(size)
        self._seed_share = 1.0  # the seeds' weight now over their weight when seeded
        self._xx, self._xt = np.zeros((size, size)), np.zeros(size)
        self.fit: np.ndarray | None = None

    def seed(self, passes: Sequence[tuple[int, int, float, float]]) -> None:
        """Replace the seed by `passes`: (rows, slots, seconds, weight) each."""
        self._seed_xx, self._seed_xt = np.zeros_like(self._seed_xx), np.zeros_like(self._seed_xt)
        self._seed_share = 1.0
        for rows, slots, seconds, weight in passes:
            x = self.regressors(rows, slots)
            self._seed_xx += weight * np.outer(x, x)
            self._seed_xt += weight * seconds * x
        self._solve()

    def add(self, rows: int, slots: int, seconds: float) -> None:
        """One observed pass, clipped to [1 / CLIP, CLIP] times the fit's prediction."""
        if self.fit is not None:
            predicted = self.seconds(rows, slots)
            seconds = min(max(seconds, predicted / CLIP), predicted * CLIP)
        x = self.regressors(rows, slots)
        self._xx = self.decay * self._xx + np.outer(x, x)
        self._xt = self.decay * self._xt + seconds * x
        self._seed_share = max(SEED_FLOOR, self._seed_share * self.decay)
        self._solve()

    def _solve(self) -> None:
        """Least squares with the terms after the first kept >= 0: a term the data would make
        negative (noisy timings: a wider pass measured faster) is dropped and the rest refitted,
        so the others still fit what was measured."""
        xx = self._seed_share * self._seed_xx + self._xx
        size = len(xx)
        scale = max(float(np.trace(xx)), 1e-12)
        ridge = np.zeros(size)
        ridge[-1] = SLOT_RIDGE
        a = xx + RIDGE * scale * np.eye(size) + np.diag(ridge)
        b = self._seed_share * self._seed_xt + self._xt
        free = list(range(size))
        while True:
            solution = np.linalg.solve(a[np.ix_(free, free)], b[free])
            negative = [i for i, v in zip(free, solution) if i > 0 and v < 0]
            if not negative:
                break
            free = [i for i in free if i not in negative]
        fit = np.zeros(size)
        fit[free] = solution
        self.fit = fit

    def terms(self) -> tuple[float, ...]:
        """The fit's terms, none negative, the slots' per entry; zeros before any seed or pass."""
        if self.fit is None:
            return (0.0,) * len(self._xt)
        values = [max(0.0, float(v)) for v in self.fit]
        values[-1] /= SLOT_UNIT
        return tuple(values)

    def seconds(self, rows: int, slots: int) -> float:
        if self.fit is None:
            return 0.0
        return float(np.dot(np.maximum(self.fit, 0.0), self.regressors(rows, slots)))


class PassPriceModel:
    """Running fits of the lone and the shared passes' seconds, and round prices from them."""

    def __init__(self, decay: float = 0.98, seed_weight: float = 4.0) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.seed_weight = seed_weight
        self.lone = LineFit(lone_regressors, decay)
        self.shared = LineFit(shared_regressors, decay)
        self.shared_seeded = False  # the shared curve started from batched passes timed at start
        self.seed_context = 0  # cached tokens before the seeded passes
        self.passes = 0  # observed passes
        self.shared_rounds = 0  # rounds of the last pass that held several (0: none yet)
        self.shared_slots = 0  # and the cached entries it read
        self.shared_rows = 0  # and its rows
        self._lone_costs: list[float] = []  # a lone round of 1, 2, ... nodes, in plain passes

    @property
    def fitted(self) -> bool:
        return self.lone.fit is not None

    def seed(self, lone_seconds: Sequence[float], context: int, batched: Sequence[tuple[int, int, float]] = ()) -> None:
        """Start from passes timed at start: lone_seconds[r - 1] for a lone pass of r new tokens
        (the pending token and r - 1 drafted nodes) after `context` cached tokens, seed_weight
        pseudo-passes in all, half of them the plain pass; their ratios to the one-token pass,
        up to the first size not timed, start the lone round's table (module docstring). And
        `batched`: (rows, slots, seconds) of batched passes, seed_weight pseudo-passes in all;
        none: the lone line's seconds at STAND_IN_ROWS stand in."""
        valid = [(r, t) for r, t in enumerate(lone_seconds, start=1) if t > 0]
        if not valid or valid[0][0] != 1:
            return
        timed = [t for _, t in valid[: next((i for i, (r, _) in enumerate(valid) if r != i + 1), len(valid))]]
        self._lone_costs = [t / timed[0] for t in timed[1:]]
        wider = max(1, len(valid) - 1)
        self.lone.seed([(rows, context, t, self.seed_weight / 2 * (1.0 if rows == 1 else 1.0 / wider)) for rows, t in valid])
        self.seed_context = context
        shared = [(rows, slots, t) for rows, slots, t in batched if rows > 0 and slots >= 0 and t > 0]
        self.shared_seeded = bool(shared)
        if not shared:
            shared = [(rows, 2 * context, self.lone.seconds(rows, 2 * context)) for rows in STAND_IN_ROWS]
        self.shared.seed([(rows, slots, t, self.seed_weight / len(shared)) for rows, slots, t in shared])

    def observe(self, rows: int, slots: int, seconds: float, rounds: int = 1) -> None:
        """One decode pass of `rounds` rounds: `rows` new-token rows (its rounds' tokens, packed)
        over `slots` cached entries, in `seconds`."""
        if rows <= 0 or slots < 0 or not seconds > 0:
            return
        if rounds >= 2:
            self.shared.add(rows, slots, seconds)
            self.shared_rounds, self.shared_slots, self.shared_rows = rounds, slots, rows
        else:
            if self.lone.fit is not None:
                self._learn_lone_cost(rows, slots, seconds)
            self.lone.add(rows, slots, seconds)
        self.passes += 1

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

    def terms(self) -> tuple[float, float, float, float]:
        """(a, j, m, k per slot) of the lone line, none negative; zeros before any seed or pass."""
        a, j, m, k = self.lone.terms()
        return a, j, m, k

    def shared_terms(self) -> tuple[float, float, float, float]:
        """(a_s, m_s, c_s, k_s per slot) of the shared curve, none negative."""
        a, m, c, k = self.shared.terms()
        return a, m, c, k

    def shared_row_seconds(self, rows: int, slots: int) -> float:
        """What one more row adds to a shared pass of `rows` rows over `slots` cached entries."""
        return self.shared.seconds(rows + 1, slots) - self.shared.seconds(rows, slots)

    @property
    def fixed_seconds(self) -> float:
        """a + j: what every lone pass of more than one row pays, whatever its shape."""
        a, j, _, _ = self.terms()
        return a + j

    def seconds(self, rows: int, slots: int, rounds: int = 1) -> float:
        """The fit's seconds for a pass of `rounds` rounds, `rows` rows over `slots` cached entries."""
        return (self.shared if rounds >= 2 else self.lone).seconds(rows, slots)

    def price(self, context: int, shared: int = 1) -> RoundPrice:
        """The price of a session's next round after `context` cached tokens, with `shared`
        rounds likely in its pass (module docstring); no price before any seed or pass."""
        if self.lone.fit is None:
            return RoundPrice()
        if shared <= 1:
            a, j, m, k = self.terms()
            plain = a + m + k * context
            if plain <= 0:
                return RoundPrice()
            return RoundPrice(m / plain, j / plain, plain, self.lone_costs)
        rounds = self.shared_rounds or shared
        slots = self.shared_slots if self.shared_rounds else rounds * context
        share = self.shared.seconds(rounds, slots) / rounds
        if share <= 0:
            return RoundPrice()
        return RoundPrice(self.shared_row_seconds(self.shared_rows or rounds, slots) / share, 0.0, share)

"""What a target pass costs the verifier, fitted online from the passes it runs: the marginal
seconds of one more padded token row, which the verifier reports with every verdict so that
drafters can price their drafts under load.

A pass over B rounds is padded to [B, T] new tokens (T: the longest round's pending tokens plus
nodes) and reads each round's own cache, L_b entries, in place (batched_pass.py). Its seconds
are modelled as

    t = a + m * rows + k * slots,    rows = B * T,  slots = sum of L_b

a: what every pass pays (weights streamed, kernel launches, the Python around it); m: one more
token row through every layer (compute); k: one more cached entry read by attention. Fitted by
exponentially weighted least squares (recent passes count more) with a ridge towards prior
figures (this project's 2-core CPU: ~45 ms, ~2.5 ms per row, ~10 us per slot), so the fit is
defined before passes of different shapes have been seen and a few passes of one shape cannot
swing it far. Rows and slots grow together under load (both scale with B), which is why slots
get their own term: without it, the cost of reading caches would be charged to drafted tokens.

Only decode passes are fitted (every round's pending tokens at most DECODE_MAX_PENDING): a
pass holding a prompt's prefill has hundreds of rows through large matrix products, where a row
costs least, and fitting those pulled m below what a drafted row costs a small decode pass.

Pure: numpy only, no I/O; the scheduler's worker thread is the only writer.
"""

from __future__ import annotations

import numpy as np

PRIOR_FIXED = 0.045  # seconds
PRIOR_ROW = 0.0025  # seconds per padded token row
PRIOR_SLOT = 1e-5  # seconds per padded cache slot
DECODE_MAX_PENDING = 16  # pending tokens of a round beyond which its pass counts as a prefill
# Regressors in units that keep the normal equations well conditioned.
ROW_UNIT = 10.0  # decode passes have 1 to a few hundred rows
SLOT_UNIT = 10_000.0


class PassTimeModel:
    """Running fit of t = a + m rows + k slots (module docstring)."""

    def __init__(self, decay: float = 0.98, prior_weight: float = 3.0) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self._prior = np.array([PRIOR_FIXED, PRIOR_ROW * ROW_UNIT, PRIOR_SLOT * SLOT_UNIT])
        self._ridge = prior_weight * np.eye(3)
        self._xx = np.zeros((3, 3))  # decayed sum of x x^T
        self._xt = np.zeros(3)  # decayed sum of x t
        self._fit = self._prior.copy()
        self.passes = 0

    def observe(self, rows: int, slots: int, seconds: float) -> None:
        """One pass: `rows` padded new-token rows over `slots` padded cache slots, in `seconds`."""
        if rows <= 0 or slots < 0 or not seconds > 0:
            return
        x = np.array([1.0, rows / ROW_UNIT, slots / SLOT_UNIT])
        self._xx = self.decay * self._xx + np.outer(x, x)
        self._xt = self.decay * self._xt + x * seconds
        self._fit = np.linalg.solve(self._xx + self._ridge, self._xt + self._ridge @ self._prior)
        self.passes += 1

    @property
    def fixed_seconds(self) -> float:
        """a: what every pass pays, whatever its shape (never negative)."""
        return max(0.0, float(self._fit[0]))

    @property
    def row_seconds(self) -> float:
        """m: the marginal seconds of one more padded token row (never negative)."""
        return max(0.0, float(self._fit[1]) / ROW_UNIT)

    @property
    def slot_seconds(self) -> float:
        return max(0.0, float(self._fit[2]) / SLOT_UNIT)

    def seconds(self, rows: int, slots: int) -> float:
        return float(self._fit[0]) + self.row_seconds * rows + self.slot_seconds * slots

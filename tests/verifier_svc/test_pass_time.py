"""pass_time: the verifier's running fit of a pass's seconds against its padded shape."""

from __future__ import annotations

import numpy as np
import pytest

from verifier_svc.pass_time import PRIOR_ROW, PassTimeModel


def test_recovers_the_row_cost_when_rows_and_slots_grow_together() -> None:
    """Under load B drives both rows (B x T) and slots (B x L): the fit must still tell the cost
    of a row (compute) from the cost of a cached slot (copies), or drafts would be charged for
    copying caches."""
    rng = np.random.default_rng(0)
    model = PassTimeModel()
    for _ in range(400):
        b = int(rng.integers(1, 33))
        t = int(rng.choice([1, 1, 2, 5, 9]))
        length = int(rng.integers(100, 1200))
        true = 0.030 + 0.004 * b * t + 2e-5 * b * length
        model.observe(b * t, b * length, true * rng.uniform(0.95, 1.05))
    assert model.row_seconds == pytest.approx(0.004, rel=0.15)
    assert model.slot_seconds == pytest.approx(2e-5, rel=0.15)
    assert model.seconds(8, 8000) == pytest.approx(0.030 + 0.032 + 0.16, rel=0.1)


def test_the_prior_holds_until_passes_say_otherwise_and_bad_input_is_ignored() -> None:
    model = PassTimeModel()
    assert model.row_seconds == pytest.approx(PRIOR_ROW)
    model.observe(0, 10, 0.05)
    model.observe(4, 10, 0.0)
    assert model.passes == 0 and model.row_seconds == pytest.approx(PRIOR_ROW)
    for _ in range(3):  # a few passes of one shape cannot swing the slope far
        model.observe(4, 100, 0.5)
    assert 0 <= model.row_seconds < 10 * PRIOR_ROW


def test_decay_follows_a_change() -> None:
    model = PassTimeModel(decay=0.95)
    rng = np.random.default_rng(1)
    for slope in (0.002, 0.008):
        for _ in range(300):
            rows = int(rng.integers(1, 256))
            model.observe(rows, 1000, 0.04 + slope * rows + 0.01)
    assert model.row_seconds == pytest.approx(0.008, rel=0.1)


def test_decode_sized_passes_alone_pin_the_row_cost() -> None:
    """Decode passes have 1 to a few hundred rows: they alone (prefills are not fitted) must move
    the row cost away from the prior, to a figure well above and well below it."""
    rng = np.random.default_rng(2)
    for per_row in (0.006, 0.0008):
        model = PassTimeModel()
        for _ in range(300):
            b, t = int(rng.integers(1, 33)), int(rng.choice([1, 1, 2, 5]))
            slots = b * int(rng.integers(100, 1200))
            model.observe(b * t, slots, 0.04 + per_row * b * t + 1e-5 * slots)
        assert model.row_seconds == pytest.approx(per_row, rel=0.15)

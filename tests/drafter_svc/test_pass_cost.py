"""pass_cost: the running model of a target pass's seconds against its drafted nodes."""

from __future__ import annotations

import numpy as np
import pytest

from drafter_svc.pass_cost import PassCostModel, RelativeCost


def test_recovers_a_line_from_noisy_rounds() -> None:
    rng = np.random.default_rng(0)
    model = PassCostModel()
    for _ in range(600):
        n = int(rng.choice([0, 0, 1, 4, 8, 16]))
        true = 0.035 if n == 0 else 0.050 + 0.003 * n
        model.observe(n, true * rng.uniform(0.9, 1.1))
    fixed, per_node = model.line()
    assert model.plain == pytest.approx(0.035, rel=0.1)  # the prior (57 ms) never decays: a ridge
    assert fixed == pytest.approx(0.050, rel=0.1)
    assert per_node == pytest.approx(0.003, rel=0.15)
    relative = model.relative()
    assert relative.per_node == pytest.approx(0.003 / 0.035, rel=0.2)
    assert relative.overhead == pytest.approx(0.015 / 0.035, rel=0.3)


def test_a_burst_of_contention_moves_the_estimate_only_a_little() -> None:
    model = PassCostModel()
    before = model.seconds(8)
    for _ in range(5):
        model.observe(8, 3.0)  # 30x slower passes, e.g. another process took the cores
    assert model.seconds(8) < 1.5 * before


def test_relative_cost_in_plain_passes() -> None:
    cost = RelativeCost(per_node=0.1, overhead=0.2)
    assert cost.of(0) == 1.0
    assert cost.of(3) == pytest.approx(1.5)
    assert cost.scaled(2.0).of(3) == pytest.approx(2.0)

"""pass_cost: the running model of a target pass's seconds against its drafted nodes."""

from __future__ import annotations

import numpy as np
import pytest

from drafter_svc.policies.depth_math import leviathan_depth
from drafter_svc.pass_cost import PassCostModel, RelativeCost


def test_recovers_a_line_from_noisy_rounds() -> None:
    rng = np.random.default_rng(0)
    model = PassCostModel()
    for _ in range(600):
        n = int(rng.choice([0, 0, 1, 4, 8, 16]))
        true = 0.035 if n == 0 else 0.050 + 0.003 * n
        model.observe(n, true * rng.uniform(0.9, 1.1))
    fixed, per_node = model.line()
    assert model.plain() == pytest.approx(0.035, rel=0.15)  # the prior (57 ms) never decays: a ridge
    assert fixed == pytest.approx(0.050, rel=0.1)
    assert per_node == pytest.approx(0.003, rel=0.15)
    relative = model.relative()
    assert relative.per_node == pytest.approx(0.003 / 0.035, rel=0.2)
    assert relative.overhead == pytest.approx(0.015 / 0.035, rel=0.3)


def test_a_burst_of_contention_moves_the_estimate_only_a_little() -> None:
    fresh, warm = PassCostModel(), PassCostModel()
    for n in range(200):
        warm.observe(n % 9, fresh.seconds(n % 9))
    before = fresh.seconds(8)
    for _ in range(5):  # 30x slower passes, e.g. another process took the cores
        fresh.observe(8, 3.0)
        warm.observe(8, 3.0)
    assert fresh.seconds(8) < 2 * before
    assert warm.seconds(8) < 1.25 * before


def test_learns_sizes_that_run_twice_as_slow_in_service_as_timed_lone() -> None:
    """In service a pass with drafts may cost far more than the verifier's lone timing of that
    size (traced: 4 nodes 46-55 ms against 35-40, while a spinning BLAS worker in the drafter
    shared the cores: specdec/cli.py). A persistent excess on some sizes, among rounds of other
    sizes at their lone cost, is learned: with each residual clipped to a quarter of the line,
    2 nodes were priced at 0.81 of what they took."""
    lone = [0.025, 0.0254, 0.0261, 0.0261, 0.0346, 0.0399]  # a verifier's lone passes, 0-5 nodes
    model = PassCostModel()
    model.seed(lone, context=128)
    rng = np.random.default_rng(0)

    def true(n: int, context: int) -> float:
        return (lone[n] + 3e-6 * context) * (2.0 if n in (2, 3) else 1.0)

    for _ in range(400):
        n, context = int(rng.choice([0, 0, 0, 1, 1, 2, 3, 4, 5])), int(rng.integers(400, 1200))
        model.observe(n, true(n, context) * rng.uniform(0.95, 1.05), context)
    for n in range(6):
        assert model.seconds(n, 800) == pytest.approx(true(n, 800), rel=0.1), n


def test_relative_cost_in_plain_passes() -> None:
    cost = RelativeCost(per_node=0.1, overhead=0.2)
    assert cost.of(0) == 1.0
    assert cost.of(3) == pytest.approx(1.5)
    assert cost.scaled(2.0).of(3) == pytest.approx(2.0)


def _stepped(n: int, context: int) -> float:
    """Seconds of a pass shaped like this CPU's (pass_cost.py), its context share steeper: a jump
    from plain to any draft, 1 ms a node, a 20 ms step from 5 nodes on, 15 us per cached token
    and 2 us more per cached token and node (each node's attention reads the cache)."""
    return 0.065 + 1.5e-5 * context + (0.0 if n == 0 else 0.028 + (0.001 + 2e-6 * context) * n + 0.020 * (n >= 5))


def test_learns_the_step_between_pass_sizes_that_a_line_misses() -> None:
    rng = np.random.default_rng(1)
    model = PassCostModel()
    for _ in range(400):
        n = int(rng.integers(0, 9))
        model.observe(n, _stepped(n, 1500) * rng.uniform(0.95, 1.05), context=1500)
    for n in range(9):
        assert model.seconds(n, 1500) == pytest.approx(_stepped(n, 1500), abs=0.004), n
    relative = model.relative(1500)
    true = [_stepped(n, 1500) / _stepped(0, 1500) for n in range(9)]
    assert relative.of(5) - relative.of(4) == pytest.approx(true[5] - true[4], abs=0.05)
    # Leviathan's optimum on the learned costs is the true one, at the step's edge; the line alone
    # puts the step's cost on every node and drafts deeper.
    alpha = 0.7
    assert leviathan_depth(alpha, 8, relative) == leviathan_depth(alpha, 8, _table(true)) == 4
    assert leviathan_depth(alpha, 8, RelativeCost(relative.per_node, relative.overhead)) > 4


def test_prices_a_long_context_against_its_own_plain_pass() -> None:
    rng = np.random.default_rng(2)
    model = PassCostModel()
    for _ in range(400):
        n, context = int(rng.choice([0, 2, 4, 8])), int(rng.choice([200, 1500]))
        model.observe(n, _stepped(n, context) * rng.uniform(0.95, 1.05), context=context)
    assert model.plain(200) == pytest.approx(_stepped(0, 200), rel=0.08)  # the prior says 57 ms
    assert model.plain(1500) - model.plain(200) == pytest.approx(_stepped(0, 1500) - _stepped(0, 200), rel=0.15)
    for context in (200, 1500):
        assert model.seconds(4, context) == pytest.approx(_stepped(4, context), rel=0.03)
        assert model.seconds(8, context) == pytest.approx(_stepped(8, context), rel=0.03)
    assert model.node_seconds(1500) - model.node_seconds(200) == pytest.approx(2e-6 * 1300, rel=0.3)
    # The cache's share is paid by plain passes too, so drafts cost relatively less at 1,500 tokens.
    true_gap = _stepped(4, 200) / _stepped(0, 200) - _stepped(4, 1500) / _stepped(0, 1500)
    assert model.relative(200).of(4) - model.relative(1500).of(4) == pytest.approx(true_gap, abs=0.05)


def test_a_size_never_seen_is_priced_by_the_line() -> None:
    model = PassCostModel()
    for _ in range(50):
        model.observe(4, 0.080)
    assert model.residual(6) == 0.0
    assert model.seconds(6) == pytest.approx(model.line_seconds(6))
    assert model.relative().of(12) == pytest.approx(1 + model.relative().overhead + 12 * model.relative().per_node)


def _table(relative: list[float]) -> RelativeCost:
    """The exact relative costs `relative` (relative[0] = 1) as a RelativeCost."""
    return RelativeCost(0.0, 0.0, tuple(r - 1.0 for r in relative[1:]))


# What a verifier on this CPU reported at start (a benchmark's log): lone passes over 1..16 tokens
# after 128 cached, padded to [1, 5, 5, 5, 5, 8, 8, 8, 9, 12, 12, 12, 13, 14, 16, 16].
VERIFIER_PASSES = [0.0587, *[0.0719] * 4, *[0.0833] * 3, 0.0928, *[0.0909] * 3, 0.0996, 0.0988, *[0.1073] * 2]


def test_a_model_seeded_with_the_verifiers_timings_prices_its_staircase_before_any_round() -> None:
    model = PassCostModel()
    model.seed(VERIFIER_PASSES, context=128)
    for n, seconds in enumerate(VERIFIER_PASSES):
        assert model.seconds(n, 128) == pytest.approx(seconds, rel=0.03), n
    relative = model.relative(128)
    true = [t / VERIFIER_PASSES[0] for t in VERIFIER_PASSES]
    assert leviathan_depth(0.7, 8, relative) == leviathan_depth(0.7, 8, _table(true[:9])) == 4
    # Rounds still teach it: the verifier got 1.5x slower for every size.
    for i in range(300):
        model.observe(i % 9, 1.5 * VERIFIER_PASSES[i % 9], context=128)
    for n in range(9):
        assert model.seconds(n, 128) == pytest.approx(1.5 * VERIFIER_PASSES[n], rel=0.05), n


def test_seeding_without_timings_keeps_the_prior() -> None:
    model, unseeded = PassCostModel(), PassCostModel()
    model.seed([], context=128)
    model.seed([0.05, 0.0], context=128)  # a size it failed to time
    model.seed([0.05, 0.06], context=-1)  # a context no verifier can have
    assert all(model.seconds(n) == unseeded.seconds(n) for n in range(17))

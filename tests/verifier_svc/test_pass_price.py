"""pass_price: the verifier's running fit of what its passes cost, and the round prices from it."""

from __future__ import annotations

import numpy as np
import pytest

from verifier_svc.pass_price import CLIP, PassPriceModel

# Lone passes of 1..9 tokens as a tuning might time them (seconds): a jump from one row to two,
# then a shallow line.
LONE = [0.040 + (0.010 + 0.002 * r if r > 1 else 0.002) for r in range(1, 10)]


def test_no_price_before_the_verifier_has_timed_anything() -> None:
    model = PassPriceModel()
    assert not model.fitted and not model.price(100).known
    model.seed([], 128)
    model.seed([0.0, 0.05], 128)  # a plain pass that did not time is no seed
    assert not model.price(100).known


def test_the_seed_prices_a_lone_round_in_plain_passes() -> None:
    model = PassPriceModel()
    model.seed(LONE, 128)
    price = model.price(128)
    assert price.plain_seconds == pytest.approx(0.042, rel=0.02)
    assert price.node_cost == pytest.approx(0.002 / 0.042, rel=0.05)
    assert price.round_overhead == pytest.approx(0.010 / 0.042, rel=0.05)
    assert price.of(0) == 1.0 and price.of(4) == pytest.approx(LONE[4] / LONE[0], rel=0.02)


def test_a_padded_staircase_is_priced_by_its_table_not_by_a_line() -> None:
    """A CPU verifier pads 2-4 tokens to 4 and 5-9 to 9 (its start-up timing, ms: 63, 71 x3,
    103 x5): a lone round's price follows the steps; past the table, and under load, the line
    prices."""
    lone = [0.063] + [0.071] * 3 + [0.103] * 5
    model = PassPriceModel()
    model.seed(lone, 128)
    for _ in range(30):  # plain passes in service move the line, not the table
        model.observe(1, 530, 0.055)
    price = model.price(530)
    assert price.round_costs == pytest.approx([0.071 / 0.063] * 3 + [0.103 / 0.063] * 5)
    assert price.of(1) == price.of(3) == pytest.approx(0.071 / 0.063)
    assert price.of(8) == pytest.approx(0.103 / 0.063)
    assert price.of(9) == pytest.approx(1 + price.round_overhead + 9 * price.node_cost)
    assert model.price(530, shared=4).round_costs == ()
    model.seed([0.063, 0.071, 0.0, 0.071], 128)  # an untimed size ends the table
    assert model.price(128).round_costs == pytest.approx([0.071 / 0.063])


def test_the_table_learns_what_lone_rounds_cost_at_the_context_they_run() -> None:
    """At 530 cached tokens a 4-token pass took 130 ms against 55 for a plain one, where the
    start-up timing at 128 gave 71 against 63: the 3-node entry follows the passes, a burst
    moves it little, and a bigger round is never priced below it."""
    lone = [0.063] + [0.071] * 3 + [0.103] * 5
    model = PassPriceModel()
    model.seed(lone, 128)
    for _ in range(3):  # a burst: three 5-token passes ten times slower
        model.observe(1, 128, 0.063)
        model.observe(4, 128, 0.71)
    assert model.price(128).of(3) < 1.2 * 0.071 / 0.063
    for _ in range(60):
        model.observe(1, 530, 0.055)
        model.observe(4, 530, 0.130)
    price = model.price(530)
    learned = 0.130 / model.seconds(1, 530)
    assert price.of(3) == pytest.approx(learned, rel=0.05) and learned > 2
    assert price.of(2) == pytest.approx(0.071 / 0.063)  # sizes not run keep their start
    assert price.round_costs[3:] == pytest.approx([price.of(3)] * 5)  # 103 / 63 < learned
    assert price.round_costs == tuple(sorted(price.round_costs))


def test_recovers_row_slot_and_jump_costs_from_passes_in_service() -> None:
    """Under load B drives both rows (B x T) and slots (B x L): the fit must still tell the cost
    of a row from the cost of a cached entry, or drafts would be charged for reading caches."""
    rng = np.random.default_rng(0)
    model = PassPriceModel()
    model.seed(LONE, 128)
    for _ in range(600):
        b = int(rng.integers(1, 33))
        t = int(rng.choice([1, 1, 2, 5, 9]))
        length = int(rng.integers(100, 1200))
        true = 0.030 + 0.006 * (b * t > 1) + 0.004 * b * t + 2e-5 * b * length
        model.observe(b * t, b * length, true * rng.uniform(0.95, 1.05), rounds=b)
    a, j, m, k = model.terms()
    assert m == pytest.approx(0.004, rel=0.15)
    assert k == pytest.approx(2e-5, rel=0.15)
    assert model.seconds(8, 8000) == pytest.approx(0.030 + 0.006 + 0.032 + 0.16, rel=0.1)


def test_a_burst_of_contention_moves_the_price_little_and_a_lasting_change_moves_it() -> None:
    model = PassPriceModel()
    model.seed(LONE, 128)
    before = model.price(128).plain_seconds
    for _ in range(3):
        model.observe(1, 128, 10 * LONE[0])  # three passes ten times slower: clipped
    assert model.price(128).plain_seconds < CLIP * before
    for _ in range(200):
        model.observe(1, 128, 2 * LONE[0])
        model.observe(5, 128, 2 * LONE[4])
    assert model.price(128).plain_seconds == pytest.approx(2 * before, rel=0.1)


def test_bad_passes_are_ignored() -> None:
    model = PassPriceModel()
    model.seed(LONE, 128)
    price = model.price(128)
    model.observe(0, 10, 0.05)
    model.observe(4, 10, 0.0)
    model.observe(4, -1, 0.05)
    assert model.passes == 0 and model.price(128) == price


def test_a_shared_pass_prices_a_node_by_the_rounds_it_pads() -> None:
    """Sharing passes, a node pads every round of the next one (S of them) and the unit is a
    round's share of the pass without drafts."""
    model = PassPriceModel()
    model.seed(LONE, 128)
    for _ in range(100):
        model.observe(8 * 5, 8 * 300, 0.030 + 0.006 + 0.004 * 40 + 2e-5 * 2400, rounds=8)
    a, j, m, k = model.terms()
    share = (a + j + m * 8 + k * 8 * 300) / 8
    price = model.price(300, shared=8)
    assert price.plain_seconds == pytest.approx(share)
    assert price.node_cost == pytest.approx(8 * m / share)
    assert price.round_overhead == 0.0
    assert model.price(300, shared=16).node_cost == pytest.approx(2 * price.node_cost)
    # a pass without drafts of 8 rounds, per round, is cheaper than a lone plain pass
    assert price.plain_seconds < model.price(300).plain_seconds


def test_noisy_seeds_that_would_make_a_term_negative_still_price_the_plain_pass() -> None:
    """Timed on a busy host a wider pass can come out faster than a narrower one: the fit drops
    the term that would go negative and still prices the plain pass as timed."""
    model = PassPriceModel()
    model.seed([0.264, 0.40, 0.30, 0.25], 32)  # passes of 2-4 tokens getting faster
    a, j, m, k = model.terms()
    assert m == 0.0 and j > 0 and k >= 0
    assert model.price(32).plain_seconds == pytest.approx(0.264, rel=0.01)

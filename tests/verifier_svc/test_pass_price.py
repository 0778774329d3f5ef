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
    """Under load B drives both rows (B x T) and slots (B x L): each line must still tell the
    cost of a row from the cost of a cached entry, or drafts would be charged for reading
    caches. Lone passes teach the lone line, passes of several rounds the shared one (its
    intercept holds the jump: every such pass has rows > 1)."""
    rng = np.random.default_rng(0)
    model = PassPriceModel()
    model.seed(LONE, 128)
    for _ in range(600):
        b = int(rng.choice([*[1] * 31, *range(2, 33)]))  # half of them lone
        t = int(rng.choice([1, 1, 2, 5, 9]))
        length = int(rng.integers(100, 3000))
        true = 0.030 + 0.006 * (b * t > 1) + 0.004 * b * t + 2e-5 * b * length
        model.observe(b * t, b * length, true * rng.uniform(0.95, 1.05), rounds=b)
    a, j, m, k = model.terms()
    assert m == pytest.approx(0.004, rel=0.15)
    assert k == pytest.approx(2e-5, rel=0.15)
    assert model.seconds(8, 800) == pytest.approx(0.030 + 0.006 + 0.032 + 0.016, rel=0.1)
    a_s, m_s, c_s, k_s = model.shared_terms()
    assert m_s == pytest.approx(0.004, rel=0.1) and c_s < 0.002 and k_s == pytest.approx(2e-5, rel=0.1)
    assert model.shared_row_seconds(40, 8000) == pytest.approx(0.004, rel=0.1)
    assert model.seconds(8, 8000, rounds=8) == pytest.approx(0.030 + 0.006 + 0.032 + 0.16, rel=0.05)


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


def test_a_shared_pass_prices_a_node_by_one_packed_row() -> None:
    """Sharing passes, the unit is a round's share of a pass of the last shared pass's rounds
    without drafts, and a node adds one row to the packed pass, whatever the rounds."""
    model = PassPriceModel()
    model.seed(LONE, 128)
    for _ in range(100):
        for rows in (8, 16, 40):
            model.observe(rows, 8 * 300, 0.036 + 0.004 * rows + 2e-5 * 2400, rounds=8)
    assert model.shared_row_seconds(40, 2400) == pytest.approx(0.004, rel=0.05)
    share = model.seconds(8, 2400, rounds=8) / 8
    assert share == pytest.approx((0.036 + 0.004 * 8 + 2e-5 * 2400) / 8, rel=0.02)
    price = model.price(300, shared=8)
    assert price.plain_seconds == pytest.approx(share)
    assert price.node_cost == pytest.approx(model.shared_row_seconds(40, 2400) / share)  # at the last pass's 40 rows
    assert price.round_overhead == 0.0 and price.round_costs == ()
    assert model.price(300, shared=16).node_cost == pytest.approx(price.node_cost)
    # a pass without drafts of 8 rounds, per round, is cheaper than a lone plain pass
    assert price.plain_seconds < model.price(300).plain_seconds


def test_lone_and_shared_passes_are_priced_by_their_own_engines() -> None:
    """On CPU onnxruntime runs the lone passes (a row ~1.4 ms) and torch the batched ones (a
    row 2-8 ms at a few rows): the shared line starts from the batched passes timed at start,
    neither line learns from the other's passes, and a lone round's price stays the lone
    engine's under load."""
    onnx = [0.026 + 0.0014 * (r - 1) for r in range(1, 10)]
    torch_batched = [(2, 256, 0.040), (4, 256, 0.056), (8, 256, 0.072), (16, 256, 0.085)]
    model = PassPriceModel()
    model.seed(onnx, 128, torch_batched)
    assert model.shared_seeded
    lone = model.price(128)
    assert lone.node_cost == pytest.approx(0.0014 / 0.026, rel=0.05)
    for rows, slots, seconds in torch_batched:  # the curve through them: steep at 2 rows, flat at 16
        assert model.seconds(rows, slots, rounds=2) == pytest.approx(seconds, rel=0.05)
    assert model.shared_row_seconds(2, 256) > 2 * model.shared_row_seconds(16, 256)
    shared = model.price(128, shared=2)
    assert shared.plain_seconds == pytest.approx(model.seconds(2, 256, rounds=2) / 2)
    assert shared.node_cost == pytest.approx(model.shared_row_seconds(2, 256) / shared.plain_seconds)
    assert shared.node_cost > 5 * lone.node_cost  # torch's rows, not onnxruntime's
    for _ in range(200):  # torch's batched passes at 4 rounds do not move the lone line
        model.observe(4, 1024, 0.060, rounds=4)
        model.observe(8, 1024, 0.075, rounds=4)
    assert model.price(128) == lone
    assert model.seconds(4, 1024, rounds=4) == pytest.approx(0.060, rel=0.03)
    assert model.price(256, shared=4).node_cost == pytest.approx(model.shared_row_seconds(8, 1024) / (0.060 / 4), rel=0.01)


def test_a_start_beside_a_busy_neighbour_is_unlearned_in_service() -> None:
    """Batched passes timed at start 5x their cost (a neighbour loading the cores) seed the
    shared curve; passes of 2-8 rows at their cost then bring the price of those passes, and of
    a node in them, to what they cost, though the seeds' 16 and 32 rows are never observed."""
    rng = np.random.default_rng(0)
    cost = lambda rows: 0.040 + 0.003 * rows  # noqa: E731
    model = PassPriceModel()
    model.seed(LONE, 128, [(rows, 256, 5 * cost(rows)) for rows in (2, 4, 8, 16, 32)])
    assert model.seconds(8, 256, rounds=2) == pytest.approx(5 * cost(8), rel=0.1)
    for _ in range(400):
        rows = int(rng.choice([2, 3, 4, 6, 8]))
        model.observe(rows, 256, cost(rows) * rng.uniform(0.95, 1.1), rounds=2)
    for rows in (2, 4, 8):
        assert model.seconds(rows, 256, rounds=2) == pytest.approx(cost(rows), rel=0.2)
    assert model.shared_row_seconds(4, 256) < 2 * 0.003


def test_seeds_still_price_what_service_never_shows() -> None:
    """After thousands of plain passes the seeds, at their floor, still tell a drafted round's
    jump and its nodes' cost from a plain pass's."""
    model = PassPriceModel()
    model.seed(LONE, 128)
    seeded = model.price(128)
    for _ in range(3000):
        model.observe(1, 128, LONE[0])
    price = model.price(128)
    assert price.plain_seconds == pytest.approx(seeded.plain_seconds, rel=0.02)
    assert price.node_cost == pytest.approx(seeded.node_cost, rel=0.1)
    assert price.round_overhead == pytest.approx(seeded.round_overhead, rel=0.1)


def test_without_timed_batched_passes_the_lone_line_stands_in() -> None:
    model = PassPriceModel()
    model.seed(LONE, 128)
    assert not model.shared_seeded
    for rows in (2, 8, 16):
        assert model.seconds(rows, 256, rounds=2) == pytest.approx(model.seconds(rows, 256), rel=0.02)


def test_noisy_seeds_that_would_make_a_term_negative_still_price_the_plain_pass() -> None:
    """Timed on a busy host a wider pass can come out faster than a narrower one: the fit drops
    the term that would go negative and still prices the plain pass as timed."""
    model = PassPriceModel()
    model.seed([0.264, 0.40, 0.30, 0.25], 32)  # passes of 2-4 tokens getting faster
    a, j, m, k = model.terms()
    assert m == 0.0 and j > 0 and k >= 0
    assert model.price(32).plain_seconds == pytest.approx(0.264, rel=0.01)

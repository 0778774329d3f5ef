"""RoundPrice: a round's cost in plain passes, and its wire form."""

from __future__ import annotations

import pytest

from specdec.round_price import RoundPrice


def test_the_table_prices_the_rounds_it_reaches_and_the_line_the_rest() -> None:
    price = RoundPrice(node_cost=0.1, round_overhead=0.2, plain_seconds=0.05, round_costs=(1.1, 1.1, 1.6))
    assert [price.of(n) for n in range(5)] == pytest.approx([1.0, 1.1, 1.1, 1.6, 1.6])  # 4 nodes: 1 + 0.2 + 0.4
    assert price.with_pending(100).round_costs == ()  # a prompt's pass is not padded
    assert RoundPrice(round_costs=(0.9,)).of(1) == 1.0  # never below a plain pass


def test_the_wire_form_round_trips_and_a_malformed_price_is_no_price() -> None:
    price = RoundPrice(0.03, 0.1, 0.06, (1.1, 1.2))
    assert RoundPrice.from_proto(price.to_proto()) == price
    assert not RoundPrice.from_proto(RoundPrice(0.03, 0.1, 0.06, (1.1, float("nan"))).to_proto()).known
    assert not RoundPrice.from_proto(RoundPrice(0.03, 0.1, 0.06, (-1.0,)).to_proto()).known

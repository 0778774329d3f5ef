"""Which waiting rounds share the next pass: the cheapest split by the pass-time fit, the oldest
round's group first; checked against a brute force over every split."""

from __future__ import annotations

import itertools
import random

import pytest

from verifier_svc.pass_packing import WaitingRound, pack

# The fit's shape on this project's CPU: ~60 ms a pass, ~1.7 ms a row, ~10 us a cache slot.
def seconds(rows: int, slots: int) -> float:
    return 0.060 + 0.0017 * rows + 1e-5 * slots


def decode(cached: int, drafted: int = 0) -> WaitingRound:
    return WaitingRound(1 + drafted, 1, cached)


def prefill(tokens: int) -> WaitingRound:
    return WaitingRound(tokens, tokens, 0)


def test_decode_rounds_of_similar_caches_share_a_pass_whatever_their_drafts() -> None:
    rounds = [decode(300, 3), decode(320), decode(280, 8), decode(310, 1)]
    assert pack(rounds, 512, seconds) == [0, 1, 2, 3]


def test_a_prefill_does_not_pad_the_decode_rounds_around_it() -> None:
    rounds = [decode(300), decode(310), prefill(200), decode(290)]
    assert pack(rounds, 512, seconds) == [0, 1, 3]  # the prompt waits for a pass of its own
    assert pack([prefill(200), decode(300), decode(310)], 512, seconds) == [0]  # or goes first, alone


def test_a_long_cache_does_not_pad_short_ones_unless_a_pass_costs_more() -> None:
    rounds = [decode(300)] * 7 + [decode(1500)]
    assert pack(rounds, 512, seconds) == list(range(7))
    assert pack(rounds[::-1], 512, seconds) == [0]
    expensive_pass = lambda rows, slots: 1.0 + 0.0017 * rows + 1e-5 * slots  # noqa: E731
    assert pack(rounds, 512, expensive_pass) == list(range(8))


def test_the_token_budget_bounds_a_pass_but_never_a_lone_round() -> None:
    assert pack([prefill(95), prefill(90), prefill(110)], 250, lambda r, s: 50.0 + r) == [0, 1]
    assert pack([prefill(600), decode(10)], 512, seconds) == [0]
    assert pack([], 512, seconds) == []


@pytest.mark.parametrize("seed", range(30))
def test_the_split_is_the_cheapest_one_and_the_oldest_round_goes_first(seed: int) -> None:
    rng = random.Random(seed)
    rounds = [
        prefill(rng.randrange(20, 300)) if rng.random() < 0.3 else decode(rng.randrange(50, 2000), rng.randrange(0, 6))
        for _ in range(rng.randrange(1, 7))
    ]
    chosen = pack(rounds, 512, seconds)
    assert 0 in chosen

    def cost(group: list[int]) -> float:
        if len(group) > 1 and len(group) * max(rounds[i].new_tokens for i in group) > 512:
            return float("inf")
        return seconds(len(group) * max(rounds[i].pending for i in group), len(group) * max(rounds[i].cached for i in group))

    def splits(items: list[int]):  # every partition of items into groups
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for size in range(len(rest) + 1):
            for others in itertools.combinations(rest, size):
                remaining = [i for i in rest if i not in others]
                for tail in splits(remaining):
                    yield [[first, *others], *tail]

    cheapest = min(sum(cost(g) for g in split) for split in splits(list(range(len(rounds)))))
    # The chosen group is part of a split as cheap as the cheapest one.
    rest = [i for i in range(len(rounds)) if i not in chosen]
    best_with_chosen = cost(chosen) + min(sum(cost(g) for g in split) for split in splits(rest))
    assert best_with_chosen == pytest.approx(cheapest, rel=1e-9)

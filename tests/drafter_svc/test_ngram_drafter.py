"""NgramDrafter: an online n-gram table chained greedily, with backoff."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from drafter_svc.drafter import Draft, make_drafter
from drafter_svc.ngram_drafter import NgramDrafter


def reference_ngram(context: Sequence[int], budget: int, max_context: int, min_context: int) -> list[int]:
    """Slow reference: for each drafted token, rescan the context for every occurrence of the
    longest seen suffix and take the most frequent next token, ties to the most recent."""
    table = list(context)
    sequence = list(context)
    for _ in range(budget):
        chosen = None
        for k in range(min(max_context, len(sequence)), min_context - 1, -1):
            suffix = sequence[len(sequence) - k :]
            seen: dict[int, tuple[int, int]] = {}  # token -> (count, last position)
            for position in range(k, len(table)):
                if table[position - k : position] == suffix:
                    count, _ = seen.get(table[position], (0, 0))
                    seen[table[position]] = (count + 1, position)
            if seen:
                chosen = max(seen, key=lambda token: seen[token])
                break
        if chosen is None:
            break
        sequence.append(chosen)
    return sequence[len(context) :]


@pytest.mark.parametrize(
    ("context", "budget", "max_context", "expected"),
    [
        ([1, 2, 3, 1, 2, 3, 1, 2], 4, 3, [3, 1, 2, 3]),  # continues a repeated pattern
        ([9, 1, 9, 1, 9, 2, 9], 1, 1, [1]),  # the most frequent continuation
        ([9, 1, 9, 2, 9], 1, 1, [2]),  # ties go to the most recent
        ([1, 2, 3, 4, 2, 5, 4, 2, 5, 1, 2], 1, 2, [3]),  # the longer context beats frequency
        ([1, 2, 3, 4, 2, 5, 4, 2, 5, 1, 2], 1, 1, [5]),
        ([1, 5, 8, 2, 5], 3, 2, [8, 2, 5]),  # (2, 5) never seen: backs off to (5,)
        ([1, 2, 3, 4], 3, 3, []),  # no context suffix was ever followed
        ([], 3, 3, []),
        ([1, 2, 1], 0, 3, []),
    ],
)
def test_chains_the_most_frequent_continuation(
    context: list[int], budget: int, max_context: int, expected: list[int]
) -> None:
    draft = NgramDrafter(max_context=max_context, min_context=1).propose(context, budget)
    assert draft == Draft.point_masses(expected)


def test_respects_the_budget() -> None:
    context = [4, 8, 15, 16, 23, 42] * 3
    for budget in range(0, 15):
        draft = NgramDrafter(min_context=1).propose(context, budget)
        assert draft.token_ids == (context * 3)[: budget]


def test_min_context_stops_backing_off() -> None:
    context = [1, 5, 8, 2, 5]  # only the 1-token context (5,) was seen
    assert NgramDrafter(max_context=3, min_context=1).propose(context, 1).token_ids == [8]
    assert NgramDrafter(max_context=3, min_context=2).propose(context, 1).token_ids == []


def test_q_are_point_masses_on_the_drafted_tokens() -> None:
    draft = NgramDrafter(min_context=1).propose([3, 1, 4, 1, 5, 9, 3, 1], 4)
    assert len(draft) == 4
    for token, ids, probs in zip(draft.token_ids, draft.q_token_ids, draft.q_probs):
        assert ids == [token] and probs == [1.0]


def test_incremental_table_matches_a_from_scratch_reference() -> None:
    rng = random.Random(4321)
    for _ in range(40):
        max_context = rng.randint(1, 5)
        min_context = rng.randint(1, max_context)
        vocab = rng.randint(2, 6)
        drafter = NgramDrafter(max_context, min_context)
        context: list[int] = []
        while len(context) < 100:
            budget = rng.randint(0, 6)
            expected = reference_ngram(context, budget, max_context, min_context)
            assert drafter.propose(context, budget).token_ids == expected
            assert NgramDrafter(max_context, min_context).propose(context, budget).token_ids == expected
            context = context + [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]


def test_reindexes_a_context_that_does_not_extend_the_last_one() -> None:
    rng = random.Random(7)
    drafter = NgramDrafter(min_context=1)
    for _ in range(30):
        context = [rng.randrange(4) for _ in range(rng.randint(0, 30))]
        assert drafter.propose(context, 5).token_ids == reference_ngram(context, 5, 8, 1)


@pytest.mark.parametrize(("max_context", "min_context"), [(0, 0), (2, 3), (3, 0)])
def test_rejects_invalid_context_lengths(max_context: int, min_context: int) -> None:
    with pytest.raises(ValueError):
        NgramDrafter(max_context, min_context)


def test_rejects_a_negative_budget() -> None:
    with pytest.raises(ValueError):
        NgramDrafter(min_context=1).propose([1, 2, 1], -1)


def test_make_drafter_ngram_is_a_fresh_table_that_needs_two_tokens_of_context() -> None:
    first = make_drafter("ngram")
    assert first.propose([1, 2, 1], 1).token_ids == []  # one token of context is not enough
    assert first.propose([1, 2, 3, 1, 2], 1).token_ids == [3]
    assert make_drafter("ngram").propose([5], 1).token_ids == []


def test_make_drafter_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="'bigram'"):
        make_drafter("bigram")

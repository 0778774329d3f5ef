"""CopyDrafter (prompt lookup decoding), the Draft type and the drafter registry."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from drafter_svc.copy_drafter import CopyDrafter
from drafter_svc.drafter import DRAFTER_NAMES, Draft, Feedback, make_drafter
from drafter_svc.ngram_drafter import NgramDrafter


def reference_copy(context: Sequence[int], budget: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Slow reference: scan the whole context for the most recent earlier occurrence of the
    longest suffix, then copy what follows, reading the copy's own output past the end."""
    sequence = list(context)
    length = len(context)
    for n in range(min(max_ngram, length), min_ngram - 1, -1):
        suffix = sequence[length - n :]
        for end in range(length - 1, n - 1, -1):
            if sequence[end - n : end] == suffix:
                for i in range(budget):
                    sequence.append(sequence[end + i])
                return sequence[length:]
    return []


@pytest.mark.parametrize(
    ("context", "budget", "expected"),
    [
        ([1, 2, 3, 4, 5, 9, 1, 2, 3], 2, [4, 5]),  # the continuation of a repeated span
        ([1, 2, 3, 4, 5, 9, 1, 2, 3], 10, [4, 5, 9, 1, 2, 3, 4, 5, 9, 1]),  # copies past the end
        ([7, 3, 10, 5, 3, 20, 7, 3], 1, [10]),  # the longest suffix [7, 3] beats the newer [3]
        ([1, 2, 10, 1, 2, 20, 1, 2], 1, [20]),  # the most recent occurrence wins
        ([5, 6, 5, 6], 5, [5, 6, 5, 6, 5]),  # a periodic pattern extends itself
        ([4, 4], 3, [4, 4, 4]),
        ([1, 2, 3, 4], 4, []),  # nothing repeats
        ([], 4, []),
        ([1], 4, []),
        ([1, 2, 1], 0, []),  # no budget
    ],
)
def test_proposes_the_continuation_of_the_longest_most_recent_match(
    context: list[int], budget: int, expected: list[int]
) -> None:
    draft = CopyDrafter(min_ngram=1).propose(context, budget)
    assert draft.token_ids == expected
    assert draft == Draft.point_masses(expected)


def test_respects_the_budget() -> None:
    context = list(range(50)) * 2
    for budget in range(0, 12):
        assert CopyDrafter(min_ngram=1).propose(context, budget).token_ids == list(range(budget))


def test_min_ngram_refuses_shorter_matches() -> None:
    context = [1, 2, 9, 8, 2]  # only the 1-gram [2] occurred before
    assert CopyDrafter(max_ngram=4, min_ngram=1).propose(context, 2).token_ids == [9, 8]
    assert CopyDrafter(max_ngram=4, min_ngram=2).propose(context, 2).token_ids == []


def test_max_ngram_bounds_the_suffix_length() -> None:
    # Suffix [1, 2, 3] occurred once (followed by 7); [2, 3] more recently (followed by 8).
    context = [1, 2, 3, 7, 2, 3, 8, 1, 2, 3]
    assert CopyDrafter(max_ngram=3, min_ngram=1).propose(context, 1).token_ids == [7]
    assert CopyDrafter(max_ngram=2, min_ngram=1).propose(context, 1).token_ids == [8]


def test_q_are_point_masses_on_the_drafted_tokens() -> None:
    draft = CopyDrafter(min_ngram=1).propose([3, 1, 4, 1, 5, 3, 1], 3)
    assert len(draft) == 3
    for token, ids, probs in zip(draft.token_ids, draft.q_token_ids, draft.q_probs):
        assert ids == [token] and probs == [1.0]


def test_incremental_index_matches_a_from_scratch_reference() -> None:
    rng = random.Random(1234)
    for _ in range(60):
        max_ngram = rng.randint(1, 6)
        min_ngram = rng.randint(1, max_ngram)
        vocab = rng.randint(2, 8)
        drafter = CopyDrafter(max_ngram, min_ngram)
        context: list[int] = []
        while len(context) < 120:
            budget = rng.randint(0, 8)
            expected = reference_copy(context, budget, max_ngram, min_ngram)
            assert drafter.propose(context, budget).token_ids == expected
            assert CopyDrafter(max_ngram, min_ngram).propose(context, budget).token_ids == expected
            context = context + [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]


def test_reindexes_a_context_that_does_not_extend_the_last_one() -> None:
    rng = random.Random(99)
    drafter = CopyDrafter(min_ngram=1)
    for _ in range(40):
        context = [rng.randrange(5) for _ in range(rng.randint(0, 40))]
        assert drafter.propose(context, 6).token_ids == reference_copy(context, 6, 8, 1)
    drafter = CopyDrafter(min_ngram=1)
    drafter.propose([1, 2, 3, 1, 2], 2)
    assert drafter.propose([1, 2], 2).token_ids == []  # shorter: the old occurrences are gone
    assert drafter.propose([9, 2, 7, 1, 2], 2).token_ids == [7, 1]  # same length, new tokens


def test_accepts_any_integer_sequence() -> None:
    assert CopyDrafter(min_ngram=1).propose((1, 2, 3, 1, 2), 1).token_ids == [3]


@pytest.mark.parametrize(("max_ngram", "min_ngram"), [(0, 0), (2, 3), (3, 0)])
def test_rejects_invalid_ngram_sizes(max_ngram: int, min_ngram: int) -> None:
    with pytest.raises(ValueError):
        CopyDrafter(max_ngram, min_ngram)


def test_rejects_a_negative_budget() -> None:
    with pytest.raises(ValueError):
        CopyDrafter(min_ngram=1).propose([1, 2, 1], -1)


def test_observe_does_not_change_proposals() -> None:
    drafter = CopyDrafter(min_ngram=1)
    context = [1, 2, 3, 1, 2]
    before = drafter.propose(context, 3)
    drafter.observe(Feedback(3, 1, [1.0, 0.0, 0.0], [3, 9]))
    assert drafter.propose(context, 3) == before


# The Draft type and the registry.


def test_point_masses() -> None:
    draft = Draft.point_masses([5, 7])
    assert draft.q_token_ids == [[5], [7]] and draft.q_probs == [[1.0], [1.0]] and len(draft) == 2
    assert len(Draft.point_masses([])) == 0


@pytest.mark.parametrize(
    ("token_ids", "q_token_ids", "q_probs"),
    [([1], [], []), ([1], [[2]], [[1.0]]), ([1], [[1, 2]], [[1.0]])],
)
def test_draft_rejects_inconsistent_distributions(
    token_ids: list[int], q_token_ids: list[list[int]], q_probs: list[list[float]]
) -> None:
    with pytest.raises(ValueError):
        Draft(token_ids, q_token_ids, q_probs)


def test_make_drafter_builds_each_named_drafter() -> None:
    assert DRAFTER_NAMES == ("copy", "ngram")
    assert isinstance(make_drafter("copy"), CopyDrafter)
    assert isinstance(make_drafter("ngram"), NgramDrafter)
    assert make_drafter("copy") is not make_drafter("copy")  # one per session


@pytest.mark.parametrize("name", ["", "Copy", "eagle", "ngram "])
def test_make_drafter_rejects_unknown_names(name: str) -> None:
    with pytest.raises(ValueError, match="unknown drafter"):
        make_drafter(name)


def test_the_default_copy_drafter_needs_a_two_token_match() -> None:
    assert CopyDrafter().propose([7, 1, 2, 9, 1], 2).token_ids == []
    assert CopyDrafter().propose([7, 1, 2, 9, 1, 2], 2).token_ids == [9, 1]

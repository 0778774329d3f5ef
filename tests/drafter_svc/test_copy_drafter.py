"""CopyDrafter (prompt lookup decoding) as a chain and as a trie, the Draft type and the drafter
registry."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from drafter_svc.copy_drafter import CopyDrafter
from drafter_svc.draft import ROOT, Draft, Feedback
from drafter_svc.drafter_names import DRAFTER_NAMES
from drafter_svc.drafter_registry import make_drafter
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
    drafter.observe(
        Feedback(num_drafted=3, accepted_nodes=[0], acceptance_probs=[1.0, 0.0, 0.0], emitted_token_ids=[3, 9])
    )
    assert drafter.propose(context, 3) == before


# Trees: max_nodes > budget.


def reference_continuation(context: Sequence[int], end: int, budget: int) -> list[int]:
    """The `budget` tokens that follow position `end` of context + copy, the copy reading itself."""
    sequence = list(context)
    for i in range(budget):
        sequence.append(sequence[end + i])
    return sequence[len(context) :]


def reference_copy_tree(
    context: Sequence[int], budget: int, max_nodes: int, max_ngram: int, min_ngram: int, max_occurrences: int
) -> tuple[list[int], list[int]]:
    """Slow reference: scan the whole context for the earlier occurrences of each suffix, longest
    suffix first and most recent first (max_occurrences per length), and merge what follows each
    into a trie of at most max_nodes nodes, in that order. Returns (token_ids, parents)."""
    length = len(context)
    continuations: list[list[int]] = []
    examined: set[int] = set()
    for n in range(min(max_ngram, length), min_ngram - 1, -1):
        suffix = list(context[length - n :])
        ends = [end for end in range(length - 1, n - 1, -1) if list(context[end - n : end]) == suffix]
        for end in ends[:max_occurrences]:
            if end not in examined:
                examined.add(end)
                continuations.append(reference_continuation(context, end, budget))
    tokens: list[int] = []
    parents: list[int] = []
    for continuation in continuations:
        node = ROOT
        for token in continuation:
            children = [i for i in range(len(tokens)) if parents[i] == node and tokens[i] == token]
            if children:
                node = children[0]
            elif len(tokens) < max_nodes:
                tokens.append(token)
                parents.append(node)
                node = len(tokens) - 1
            else:
                break
    return tokens, parents


def root_to_leaf_paths(draft: Draft) -> list[list[int]]:
    """The token paths from the root to each leaf, in leaf order."""
    leaves = set(range(len(draft))) - set(draft.parents)
    paths = []
    for leaf in sorted(leaves):
        path, node = [], leaf
        while node != ROOT:
            path.append(draft.token_ids[node])
            node = draft.parents[node]
        paths.append(path[::-1])
    return paths


def assert_is_a_trie(draft: Draft, budget: int, max_nodes: int, chain: list[int]) -> None:
    """The shape every tree drafter promises: within budget and max_nodes, parents first, siblings
    distinct, point masses, and the chain as the first nodes."""
    assert len(draft) <= max_nodes and draft.depth() <= budget
    assert all(parent < node for node, parent in enumerate(draft.parents))
    edges = list(zip(draft.parents, draft.token_ids))
    assert len(set(edges)) == len(edges)
    assert draft.q_token_ids == [[t] for t in draft.token_ids] and draft.q_probs == [[1.0]] * len(draft)
    assert draft.token_ids[: len(chain)] == chain and draft.parents[: len(chain)] == list(range(ROOT, len(chain) - 1))


@pytest.mark.parametrize(
    ("context", "budget", "max_nodes", "token_ids", "parents"),
    [
        # [1, 2] was followed by 4, 2, 5 (most recent), then by 3, 1, 2; [2] also by 5, 1, 2.
        ([1, 2, 3, 1, 2, 4, 2, 5, 1, 2], 3, 8, [4, 2, 5, 3, 1, 2, 5, 1], [ROOT, 0, 1, ROOT, 3, 4, ROOT, 6]),
        ([1, 2, 3, 1, 2, 4, 2, 5, 1, 2], 3, 5, [4, 2, 5, 3, 1], [ROOT, 0, 1, ROOT, 3]),  # cut at max_nodes
        ([1, 2, 3, 1, 2, 4, 2, 5, 1, 2], 2, 8, [4, 2, 3, 1, 5, 1], [ROOT, 0, ROOT, 2, ROOT, 4]),  # and at depth
        # Two occurrences of [1, 2] share their first token 3: one node for it.
        ([1, 2, 3, 4, 9, 1, 2, 3, 5, 1, 2], 3, 9, [3, 5, 1, 4, 9], [ROOT, 0, 1, 0, 3]),
        # The second branch, after [2] -> 8, 1, 2, runs past the end and copies its own output: 8.
        ([1, 2, 9, 9, 2, 8, 1, 2], 4, 9, [9, 9, 2, 8, 8, 1, 2, 8], [ROOT, 0, 1, 2, ROOT, 4, 5, 6]),
        ([1, 2, 3, 4], 3, 9, [], []),  # nothing repeats
        ([1, 2, 1], 0, 9, [], []),  # no depth
        ([1, 2, 1], 2, 0, [], []),  # no nodes
    ],
)
def test_merges_the_continuations_of_several_occurrences_into_a_trie(
    context: list[int], budget: int, max_nodes: int, token_ids: list[int], parents: list[int]
) -> None:
    draft = CopyDrafter(min_ngram=1).propose(context, budget, max_nodes)
    assert draft == Draft.point_masses(token_ids, parents)


def test_max_nodes_up_to_the_budget_gives_the_chain() -> None:
    rng = random.Random(5)
    for _ in range(100):
        context = [rng.randrange(4) for _ in range(rng.randint(0, 30))]
        budget = rng.randint(0, 6)
        chain = reference_copy(context, budget, 8, 1)
        assert CopyDrafter(min_ngram=1).propose(context, budget, budget) == Draft.point_masses(chain)
        max_nodes = rng.randint(0, budget)
        assert CopyDrafter(min_ngram=1).propose(context, budget, max_nodes) == Draft.point_masses(chain[:max_nodes])


def test_trees_are_tries_of_earlier_continuations_within_budget_and_max_nodes() -> None:
    rng = random.Random(2024)
    for _ in range(200):
        max_ngram = rng.randint(1, 5)
        min_ngram = rng.randint(1, min(2, max_ngram))
        vocab = rng.randint(2, 5)
        context = [rng.randrange(vocab) for _ in range(rng.randint(5, 60))]
        budget = rng.randint(1, 6)
        max_nodes = rng.randint(budget, 4 * budget + 4)
        drafter = CopyDrafter(max_ngram, min_ngram, max_occurrences=rng.randint(1, 4))
        draft = drafter.propose(context, budget, max_nodes)
        chain = reference_copy(context, budget, max_ngram, min_ngram)[:max_nodes]
        assert_is_a_trie(draft, budget, max_nodes, chain)
        # Every path starts what followed some earlier occurrence of some suffix; only a full tree
        # has paths cut short of the budget.
        length = len(context)
        continuations = [
            reference_continuation(context, end, budget)
            for n in range(min_ngram, min(max_ngram, length) + 1)
            for end in range(n, length)
            if context[end - n : end] == context[length - n :]
        ]
        for path in root_to_leaf_paths(draft):
            assert any(path == continuation[: len(path)] for continuation in continuations)
            assert len(path) == budget or len(draft) == max_nodes


def test_incremental_trees_match_a_from_scratch_reference() -> None:
    rng = random.Random(31)
    for _ in range(30):
        max_ngram = rng.randint(1, 5)
        min_ngram = rng.randint(1, min(2, max_ngram))
        max_occurrences = rng.randint(1, 5)
        vocab = rng.randint(2, 6)
        drafter = CopyDrafter(max_ngram, min_ngram, max_occurrences)
        context: list[int] = []
        while len(context) < 100:
            budget, max_nodes = rng.randint(0, 6), rng.randint(0, 20)
            expected = reference_copy_tree(context, budget, max_nodes, max_ngram, min_ngram, max_occurrences)
            assert drafter.propose(context, budget, max_nodes) == Draft.point_masses(*expected)
            context = context + [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]


def test_examines_only_the_most_recent_occurrences() -> None:
    # [1, 2] occurred three times before the suffix, followed by 7, then 8, then 9.
    context = [1, 2, 7, 1, 2, 8, 1, 2, 9, 1, 2]
    assert CopyDrafter(max_ngram=2, min_ngram=2, max_occurrences=2).propose(context, 1, 9).token_ids == [9, 8]
    assert CopyDrafter(max_ngram=2, min_ngram=2, max_occurrences=3).propose(context, 1, 9).token_ids == [9, 8, 7]


def test_rejects_a_negative_max_nodes_or_no_occurrences() -> None:
    with pytest.raises(ValueError):
        CopyDrafter(min_ngram=1).propose([1, 2, 1], 2, -1)
    with pytest.raises(ValueError):
        CopyDrafter(max_occurrences=0)


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
        Draft(token_ids, [ROOT] * len(token_ids), q_token_ids, q_probs)


@pytest.mark.parametrize("parents", [[], [0], [-2], [ROOT, 1], [ROOT, ROOT, 3]])
def test_draft_rejects_parents_that_do_not_precede_their_children(parents: list[int]) -> None:
    tokens = [5] * max(1, len(parents))
    with pytest.raises(ValueError):
        Draft(tokens, parents, [[t] for t in tokens], [[1.0] for _ in tokens])


def test_point_masses_of_a_tree() -> None:
    draft = Draft.point_masses([5, 7, 8, 9], [ROOT, 0, ROOT, 2])
    assert draft.parents == [ROOT, 0, ROOT, 2] and draft.depth() == 2
    assert Draft.point_masses([5, 7, 8]).parents == [ROOT, 0, 1] and Draft.point_masses([5, 7, 8]).depth() == 3
    assert Draft.point_masses([]).depth() == 0


def test_make_drafter_builds_each_named_drafter() -> None:
    assert DRAFTER_NAMES == ("copy", "ngram", "onnx-quantized", "onnx-small", "hybrid")  # the ONNX ones: test_onnx_drafter.py
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

"""NgramDrafter: an online n-gram table chained greedily, with backoff, or expanded best-first into
a tree."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from drafter_svc.draft import ROOT, Draft
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.ngram_drafter import Continuations, NgramDrafter
from tests.drafter_svc.test_copy_drafter import assert_is_a_trie


def reference_ngram(context: Sequence[int], budget: int, max_context: int, min_context: int) -> list[int]:
    """Slow reference: for each drafted token, rescan the context for every occurrence of the
    longest seen suffix and take the most frequent next token, ties to the most recent."""
    sequence = list(context)
    for _ in range(budget):
        seen = reference_distribution(context, sequence, max_context, min_context)
        if not seen:
            break
        sequence.append(seen[0][0])
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


# Trees: max_nodes > budget.


def reference_distribution(
    context: Sequence[int], sequence: Sequence[int], max_context: int, min_context: int
) -> list[tuple[int, float]]:
    """Slow reference: the tokens that followed the longest suffix of `sequence` seen in `context`,
    most frequent first (ties -> the most recent), with their frequencies."""
    table = list(context)
    for k in range(min(max_context, len(sequence)), min_context - 1, -1):
        suffix = list(sequence[len(sequence) - k :])
        seen: dict[int, tuple[int, int]] = {}  # token -> (count, last position)
        for position in range(k, len(table)):
            if table[position - k : position] == suffix:
                count, _ = seen.get(table[position], (0, 0))
                seen[table[position]] = (count + 1, position)
        if seen:
            total = sum(count for count, _ in seen.values())
            ranked = sorted(seen, key=seen.__getitem__, reverse=True)
            return [(token, seen[token][0] / total) for token in ranked]
    return []


def reference_ngram_tree(
    context: Sequence[int], budget: int, max_nodes: int, max_context: int, min_context: int
) -> tuple[list[int], list[int]]:
    """Slow reference: the greedy chain, then, while nodes remain, the node whose next most frequent
    continuation not yet drafted has the highest path score (ties -> the earliest node, ROOT
    first) gets it as a child. Returns (token_ids, parents)."""
    tokens = reference_ngram(context, min(budget, max_nodes), max_context, min_context)
    parents = list(range(ROOT, len(tokens) - 1))
    if max_nodes <= budget:
        return tokens, parents
    paths: dict[int, list[int]] = {ROOT: []}
    scores: dict[int, float] = {ROOT: 1.0}
    for node, token in enumerate(tokens):
        seen = dict(reference_distribution(context, list(context) + paths[node - 1], max_context, min_context))
        paths[node], scores[node] = paths[node - 1] + [token], scores[node - 1] * seen[token]
    while len(tokens) < max_nodes:
        best = None
        for node in range(ROOT, len(tokens)):
            if len(paths[node]) == budget:
                continue
            children = {tokens[i] for i in range(len(tokens)) if parents[i] == node}
            ranked = reference_distribution(context, list(context) + paths[node], max_context, min_context)
            options = [(token, frequency) for token, frequency in ranked if token not in children]
            if options and (best is None or scores[node] * options[0][1] > best[0]):
                best = (scores[node] * options[0][1], node, options[0][0])
        if best is None:
            break
        score, parent, token = best
        paths[len(tokens)], scores[len(tokens)] = paths[parent] + [token], score
        tokens.append(token)
        parents.append(parent)
    return tokens, parents


# After 5: 1 (2/3), 2 (1/3). After 1: 5 (2/3), 3 (1/3). After 2: 4, 1 (1/2 each; 4 is more
# recent). After 3: 2. After 4: 5.
BRANCHY = [5, 1, 5, 1, 5, 2, 1, 3, 2, 4, 5]


@pytest.mark.parametrize(
    ("context", "budget", "max_nodes", "token_ids", "parents"),
    [
        (BRANCHY, 3, 3, [1, 5, 1], [ROOT, 0, 1]),  # the chain, path scores 2/3, 4/9, 8/27
        # Then 2 after the root (1/3), 3 after node 0 (2/9), then 2 after node 4 (2/9): deeper,
        # but more likely than 4 after node 3 (1/6) or 2 after node 1 (4/27).
        (BRANCHY, 3, 6, [1, 5, 1, 2, 3, 2], [ROOT, 0, 1, ROOT, 0, 4]),
        # Then 4 after node 3 (1/6); then 1 after node 3 ties 5 after node 6 (1/6): the earlier parent.
        (BRANCHY, 3, 8, [1, 5, 1, 2, 3, 2, 4, 1], [ROOT, 0, 1, ROOT, 0, 4, 3, 3]),
        (BRANCHY, 1, 8, [1, 2], [ROOT, ROOT]),  # depth 1: only the root's continuations
        # After 1: 2 (3/4), 3 (1/4); after 2 only 1: the tree runs out of candidates at 3 nodes.
        ([1, 2, 1, 2, 1, 3, 1, 2], 2, 4, [1, 2, 3], [ROOT, 0, 0]),
        ([1, 2, 3, 4], 3, 9, [], []),  # no context suffix was ever followed
        ([1, 2, 1], 2, 0, [], []),
    ],
)
def test_spends_the_nodes_beyond_the_chain_best_first(
    context: list[int], budget: int, max_nodes: int, token_ids: list[int], parents: list[int]
) -> None:
    draft = NgramDrafter(max_context=1, min_context=1).propose(context, budget, max_nodes)
    assert draft == Draft.point_masses(token_ids, parents)


def test_max_nodes_up_to_the_budget_gives_the_chain() -> None:
    rng = random.Random(11)
    for _ in range(100):
        context = [rng.randrange(4) for _ in range(rng.randint(0, 30))]
        budget = rng.randint(0, 6)
        chain = reference_ngram(context, budget, 8, 1)
        assert NgramDrafter(min_context=1).propose(context, budget, budget) == Draft.point_masses(chain)
        max_nodes = rng.randint(0, budget)
        assert NgramDrafter(min_context=1).propose(context, budget, max_nodes) == Draft.point_masses(chain[:max_nodes])


def test_trees_extend_the_chain_with_continuations_seen_after_each_path() -> None:
    rng = random.Random(808)
    for _ in range(150):
        max_context = rng.randint(1, 4)
        min_context = rng.randint(1, min(2, max_context))
        vocab = rng.randint(2, 5)
        context = [rng.randrange(vocab) for _ in range(rng.randint(5, 50))]
        budget = rng.randint(1, 6)
        max_nodes = rng.randint(budget, 4 * budget + 4)
        draft = NgramDrafter(max_context, min_context).propose(context, budget, max_nodes)
        chain = reference_ngram(context, budget, max_context, min_context)
        assert_is_a_trie(draft, budget, max_nodes, chain)
        paths: dict[int, list[int]] = {ROOT: []}
        for node, (token, parent) in enumerate(zip(draft.token_ids, draft.parents)):
            seen = reference_distribution(context, context + paths[parent], max_context, min_context)
            assert token in [continuation for continuation, _ in seen]
            paths[node] = paths[parent] + [token]


def test_incremental_trees_match_a_from_scratch_reference() -> None:
    rng = random.Random(77)
    for _ in range(25):
        max_context = rng.randint(1, 4)
        min_context = rng.randint(1, min(2, max_context))
        vocab = rng.randint(2, 5)
        drafter = NgramDrafter(max_context, min_context)
        context: list[int] = []
        while len(context) < 80:
            budget, max_nodes = rng.randint(0, 5), rng.randint(0, 16)
            expected = reference_ngram_tree(context, budget, max_nodes, max_context, min_context)
            assert drafter.propose(context, budget, max_nodes) == Draft.point_masses(*expected)
            context = context + [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]


def test_continuations_rank_by_count_then_recency() -> None:
    continuations = Continuations()
    for token in [3, 1, 2, 1, 3, 4, 2]:  # 1, 2 and 3 twice each; 2 most recently
        continuations.add(token)
    assert continuations.top(9) == [(2, 2), (3, 2), (1, 2), (4, 1)]
    assert continuations.top(2) == [(2, 2), (3, 2)] and continuations.total == 7
    rng = random.Random(3)
    for _ in range(50):
        continuations = Continuations()
        for _ in range(rng.randint(1, 30)):
            continuations.add(rng.randrange(6))
            assert continuations.top(1) == [(continuations.best, continuations.best_count)]


def test_rejects_a_negative_max_nodes() -> None:
    with pytest.raises(ValueError):
        NgramDrafter(min_context=1).propose([1, 2, 1], 2, -1)

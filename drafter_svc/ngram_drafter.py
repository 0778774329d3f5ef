"""N-gram drafter: a table of next-token counts built from the context as it grows, drafting a
chain or a token tree.

The "trivial n-gram model" of Leviathan et al. (2023), section 4.2, fitted online to the session's
own tokens: for every preceding k-token context (k from max_context down to min_context), count
the tokens that followed it. Propose by chaining the most frequent continuation, backing off to
shorter contexts that have been seen. Given more nodes than the budget, spend the rest best-first
on alternatives, the most probable paths first under the table's empirical frequencies.
Deterministic, so each q is a point mass.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from drafter_svc.append_only_cursor import AppendOnlyCursor
from drafter_svc.draft import ROOT, Draft
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.drafter import Drafter, KeepDrafting

# Chosen by replaying greedy decoding (SmolLM2-135M-Instruct outputs, code edits, prose) at budget
# 4 and 8, with chains: long contexts find the right continuation in
# code full of repeated short n-grams (edits: 3.32 tokens/round with 3 tokens of context, 3.64
# with 4, 3.94 with 8, at budget 4). Backing off to 1 token raises tokens/round but drafts
# mostly-rejected tokens nearly every round; on a 2-core CPU, where a pass with drafts costs ~30%
# more, stopping at 2 is faster end to end (`specdec bench --quick`, one run each: ngram-k4
# 1.04x -> 1.13x overall). Trees are opt-in (max_nodes > budget); their default shape is left to
# a benchmark.
DEFAULT_MAX_CONTEXT = 8
DEFAULT_MIN_CONTEXT = 2


class Continuations:
    """Counts of the tokens seen after one context, with the most frequent one (ties -> the most
    recently seen) kept up to date in O(1) per observation."""

    __slots__ = ("counts", "total", "best", "best_count")

    def __init__(self) -> None:
        # Ordered by last occurrence: add() re-inserts its token, so of two equal counts the later
        # one is the more recently seen.
        self.counts: dict[int, int] = {}
        self.total = 0
        self.best = -1
        self.best_count = 0

    def add(self, token: int) -> None:
        count = self.counts.pop(token, 0) + 1
        self.counts[token] = count
        self.total += 1
        # Only this token's count changed and it is now the most recent: it wins any tie.
        if count >= self.best_count:
            self.best, self.best_count = token, count

    def top(self, k: int) -> list[tuple[int, int]]:
        """The k most frequent (token, count) pairs, most frequent first, ties -> the most recently
        seen; so top(1) is [(best, best_count)]. O(distinct tokens * log k)."""
        ranked = heapq.nlargest(k, enumerate(self.counts.items()), key=lambda item: (item[1][1], item[0]))
        return [pair for _, pair in ranked]


class NgramDrafter(Drafter):
    """Chain the most frequent continuation of the longest seen context suffix (max_context tokens
    down to min_context), up to `budget` tokens, stopping when no context suffix has been seen.
    max_nodes up to budget (the default) gives that chain, cut to max_nodes.

    With max_nodes > budget the draft is a tree: that chain first, then the remaining nodes
    best-first. A path scores the product of the empirical frequencies (count / total count of the
    backed-off context) of its tokens; the next node is always the highest-scoring candidate child
    (ties -> the earlier parent), where each node's candidate is its next most frequent
    continuation not yet drafted, and no path is longer than `budget`. The tree contains the
    chain, so under greedy verification it never accepts fewer tokens than the chain would.

    Incremental: the table is extended with the tokens appended since the last call, so `propose`
    costs O(max_context) lookups per node, plus, for a tree, a ranking of each expanded node's
    continuations and O(log max_nodes) per node for the frontier heap, plus the new tokens times
    the number of orders. A context that does not extend the indexed one is re-indexed from
    scratch.
    """

    def __init__(self, max_context: int = DEFAULT_MAX_CONTEXT, min_context: int = DEFAULT_MIN_CONTEXT) -> None:
        if not 1 <= min_context <= max_context:
            raise ValueError(f"need 1 <= min_context <= max_context, got {min_context} and {max_context}")
        self.max_context = max_context
        self.min_context = min_context
        # A context followed by one token so far maps to that token: most long contexts occur
        # once, and a bare int costs a fraction of a Continuations.
        self._table: dict[tuple[int, ...], int | Continuations] = {}
        self._cursor = AppendOnlyCursor(max_context)

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if max_nodes is not None and max_nodes < 0:
            raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
        self._index(context)
        node_budget = budget if max_nodes is None else max_nodes
        tree = _Tree(list(context[max(0, len(context) - self.max_context) :]), self.max_context)
        # The greedy chain, exactly as without a tree.
        node = ROOT
        while len(tree) < min(budget, node_budget):
            seen = self._longest_seen(tree.windows[node])
            if seen is None:
                break
            k, entry = seen
            if isinstance(entry, int):
                node = tree.add(node, entry, 1.0, k)
            else:
                node = tree.add(node, entry.best, entry.best_count / entry.total, k)
        if node_budget <= budget:
            return tree.draft()
        # Then best-first. Each node keeps one candidate on the heap, its most frequent continuation
        # not yet drafted (of rank `rank`), scored by the path it would end.
        ranked: dict[int, list[tuple[int, float]]] = {}
        orders: dict[int, int] = {}  # the backed-off context length of each parent's candidates
        frontier: list[tuple[float, int, int]] = []  # (-score, parent, rank)

        def push(parent: int, rank: int) -> None:
            if tree.depths[parent] >= budget:
                return
            if parent not in ranked:
                ranked[parent], orders[parent] = self._ranked(tree.windows[parent], node_budget)
            if rank < len(ranked[parent]):
                heapq.heappush(frontier, (-tree.scores[parent] * ranked[parent][rank][1], parent, rank))

        # Rank 0 is the chain's own child; the chain's last node has none but also no candidates
        # (it is `budget` deep, or no context suffix of its path was ever followed).
        for parent in range(ROOT, len(tree)):
            push(parent, 1)
        while frontier and len(tree) < node_budget:
            _, parent, rank = heapq.heappop(frontier)
            token, frequency = ranked[parent][rank]
            child = tree.add(parent, token, frequency, orders[parent])
            push(parent, rank + 1)
            push(child, 0)
        return tree.draft()

    def _longest_seen(self, recent: Sequence[int]) -> tuple[int, int | Continuations] | None:
        """The length of the longest suffix of `recent` seen followed by a token, and its
        continuations."""
        for k in range(min(self.max_context, len(recent)), self.min_context - 1, -1):
            entry = self._table.get(tuple(recent[len(recent) - k :]))
            if entry is not None:
                return k, entry
        return None

    def _ranked(self, recent: Sequence[int], k: int) -> tuple[list[tuple[int, float]], int]:
        """The k most frequent continuations of `recent` (backed off), with their frequencies, and
        the length of the context they follow."""
        seen = self._longest_seen(recent)
        if seen is None:
            return [], 0
        order, entry = seen
        if isinstance(entry, int):
            return [(entry, 1.0)], order
        return [(token, count / entry.total) for token, count in entry.top(k)], order

    def _index(self, context: Sequence[int]) -> None:
        if not self._cursor.extended_by(context):
            self._table.clear()
            self._cursor.reset()
        for position in range(max(self._cursor.length, self.min_context), len(context)):
            token = int(context[position])
            for k in range(self.min_context, min(self.max_context, position) + 1):
                key = tuple(context[position - k : position])
                entry = self._table.get(key)
                if entry is None:
                    self._table[key] = token
                elif isinstance(entry, int):
                    continuations = self._table[key] = Continuations()
                    continuations.add(entry)
                    continuations.add(token)
                else:
                    entry.add(token)
        self._cursor.advance(context)


class _Tree:
    """The nodes drafted so far, each with its last max_context tokens of context + path, its depth
    and its path's score; ROOT (the context itself) is an entry too, at depth 0 with score 1."""

    def __init__(self, recent: list[int], max_context: int) -> None:
        self.max_context = max_context
        self.token_ids: list[int] = []
        self.parents: list[int] = []
        self.windows: dict[int, list[int]] = {ROOT: recent}
        self.depths: dict[int, int] = {ROOT: 0}
        self.scores: dict[int, float] = {ROOT: 1.0}
        self.orders: list[int] = []  # the context length each node's prediction rests on
        self.frequencies: list[float] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    def add(self, parent: int, token: int, frequency: float, order: int) -> int:
        node = len(self.token_ids)
        self.token_ids.append(token)
        self.parents.append(parent)
        self.windows[node] = (self.windows[parent] + [token])[-self.max_context :]
        self.depths[node] = self.depths[parent] + 1
        self.scores[node] = self.scores[parent] * frequency
        self.orders.append(order)
        self.frequencies.append(frequency)
        return node

    def draft(self) -> Draft:
        return Draft.point_masses(self.token_ids, self.parents, self.orders, self.frequencies)

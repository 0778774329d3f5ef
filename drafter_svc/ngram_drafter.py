"""N-gram drafter: a table of next-token counts built from the context as it grows.

The "trivial n-gram model" of Leviathan et al. (2023), section 4.2, fitted online to the session's
own tokens: for every preceding k-token context (k from max_context down to min_context), count
the tokens that followed it. Propose by chaining the most frequent continuation, backing off to
shorter contexts that have been seen. Deterministic, so each q is a point mass.
"""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.drafter import AppendOnlyCursor, Draft, Feedback

# Chosen by replaying greedy decoding (SmolLM2-135M-Instruct outputs, code edits, prose) at budget
# 4 and 8: long contexts find the right continuation in code full of repeated short n-grams
# (edits: 3.32 tokens/round with 3 tokens of context, 3.64 with 4, 3.94 with 8, at budget 4).
# Backing off to 1 token raises tokens/round but drafts mostly-rejected tokens nearly every round;
# on a 2-core CPU, where a pass with drafts costs ~30% more, stopping at 2 is faster end to end
# (`specdec bench --quick`, one run each: ngram-k4 1.04x -> 1.13x overall).
DEFAULT_MAX_CONTEXT = 8
DEFAULT_MIN_CONTEXT = 2


class Continuations:
    """Counts of the tokens seen after one context, with the most frequent one (ties -> the most
    recently seen) kept up to date in O(1) per observation."""

    __slots__ = ("counts", "best", "best_count")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.best = -1
        self.best_count = 0

    def add(self, token: int) -> None:
        count = self.counts.get(token, 0) + 1
        self.counts[token] = count
        # Only this token's count changed and it is now the most recent: it wins any tie.
        if count >= self.best_count:
            self.best, self.best_count = token, count


class NgramDrafter:
    """Chain the most frequent continuation of the longest seen context suffix (max_context tokens
    down to min_context), up to `budget` tokens, stopping when no context suffix has been seen.

    Incremental: the table is extended with the tokens appended since the last call, so `propose`
    costs O(budget * max_context) plus the new tokens times the number of orders. A context that
    does not extend the indexed one is re-indexed from scratch.
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

    def propose(self, context: Sequence[int], budget: int) -> Draft:
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        self._index(context)
        recent = list(context[max(0, len(context) - self.max_context) :])
        drafted: list[int] = []
        while len(drafted) < budget:
            token = self._most_frequent_next(recent)
            if token is None:
                break
            drafted.append(token)
            recent = recent[1:] + [token] if len(recent) == self.max_context else recent + [token]
        return Draft.point_masses(drafted)

    def observe(self, feedback: Feedback) -> None:
        """Nothing to learn: the emitted tokens arrive with the next context."""

    def _most_frequent_next(self, recent: list[int]) -> int | None:
        for k in range(min(self.max_context, len(recent)), self.min_context - 1, -1):
            entry = self._table.get(tuple(recent[len(recent) - k :]))
            if entry is not None:
                return entry if isinstance(entry, int) else entry.best
        return None

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

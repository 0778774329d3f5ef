"""Copy drafter: prompt lookup decoding (Saxena, 2023; vLLM's "ngram" speculator), as a chain or a
token tree.

Summaries, code edits and retrieval answers repeat spans of their prompt. Find the longest suffix
of the context (max_ngram tokens down to min_ngram) that occurred earlier, and propose the tokens
that followed its most recent earlier occurrence. Given more nodes than the budget, also propose
what followed other earlier occurrences, merged into a prefix tree (a trie) so that each
verifier pass checks several candidate continuations. A negligible-cost drafter in the sense of
Leviathan et al. (2023), section 3.5: a table lookup, deterministic, so each q is a point mass.
"""

from __future__ import annotations

from collections.abc import Sequence

from drafter_svc.append_only_cursor import AppendOnlyCursor
from drafter_svc.draft import ROOT, Draft
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.drafter import Drafter, KeepDrafting

# Chosen by measurement of chains. Replaying greedy decoding
# (SmolLM2-135M-Instruct outputs, code edits, prose): longer suffixes keep pointing at the right
# place in code full of repeated short n-grams (edits: 3.66 tokens/round with max 4, 3.91 with 8,
# 3.98 with 12, at budget 4). End to end on a 2-core CPU, where a pass with drafts costs ~30% more
# than one without, a minimum of 2 beats 1: 1-token matches draft nearly every round and are
# mostly rejected (`specdec bench --quick`, one run each: copy-k4 1.03x -> 1.09x overall,
# MT-bench 0.75x -> 1.00x).
DEFAULT_MAX_NGRAM = 8
DEFAULT_MIN_NGRAM = 2
# Not measured: a bound on the work of one call and on the index's memory. Trees are opt-in
# (max_nodes > budget); their default shape is left to a benchmark.
DEFAULT_MAX_OCCURRENCES = 8


class CopyDrafter(Drafter):
    """Propose the continuation of the most recent earlier occurrence of the longest matching
    context suffix, up to `budget` tokens; an empty draft when no suffix of min_ngram tokens or
    more occurred before. max_nodes up to budget (the default) gives that chain, cut to max_nodes.

    With max_nodes > budget the draft is a trie of continuations, in priority order: that chain
    first, at full depth; then the other recent occurrences of the same suffix, most recent first;
    then those of shorter suffixes, down to min_ngram. Each adds the nodes it does not share with
    the trie, cut at `budget` deep and at max_nodes in all. Per suffix length only the
    max_occurrences most recent occurrences are kept and examined.

    Incremental: a hash index n-gram -> ends of its recent occurrences is extended with the
    tokens appended since the last call, so `propose` costs O(max_ngram) lookups plus
    O(budget) per occurrence examined (at most max_occurrences per suffix length, and it stops
    once max_nodes nodes exist: a chain examines one), plus the new tokens times the number of
    n-gram sizes, however long the context. A context that does not extend the indexed one is
    re-indexed from scratch.
    """

    def __init__(
        self,
        max_ngram: int = DEFAULT_MAX_NGRAM,
        min_ngram: int = DEFAULT_MIN_NGRAM,
        max_occurrences: int = DEFAULT_MAX_OCCURRENCES,
    ) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        if max_occurrences < 1:
            raise ValueError(f"max_occurrences must be >= 1, got {max_occurrences}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_occurrences = max_occurrences
        # n-gram -> index just past each of its most recent occurrences whose next token is known,
        # oldest first: a bare int while it occurred once (most long n-grams do), else a list of
        # at most max_occurrences.
        self._ends: dict[tuple[int, ...], int | list[int]] = {}
        self._cursor = AppendOnlyCursor(max_ngram)

    def propose(
        self, context: Sequence[int], budget: int, max_nodes: int | None = None, keep_drafting: KeepDrafting | None = None,
        guide: DraftGuide | None = None,
    ) -> Draft:
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if max_nodes is not None and max_nodes < 0:
            raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
        self._index(context)
        trie = _Trie(budget if max_nodes is None else max_nodes)
        length = len(context)
        examined: set[int] = set()  # an occurrence of a suffix also ends the shorter suffixes
        for n in range(min(self.max_ngram, length), self.min_ngram - 1, -1):
            if budget == 0 or trie.full():
                break
            for end in self._recent_ends(tuple(context[length - n : length])):
                if end not in examined:
                    examined.add(end)
                    trie.insert(copy_from(context, end, budget), n)
                    if trie.full():
                        break
        return Draft.point_masses(trie.token_ids, trie.parents, trie.match_lengths)

    def _recent_ends(self, ngram: tuple[int, ...]) -> list[int]:
        """Ends of the kept occurrences of `ngram`, most recent first."""
        ends = self._ends.get(ngram)
        if ends is None:
            return []
        return [ends] if isinstance(ends, int) else ends[::-1]

    def _index(self, context: Sequence[int]) -> None:
        if not self._cursor.extended_by(context):
            self._ends.clear()
            self._cursor.reset()
        # An n-gram ending at `end` is indexed once its next token, context[end], exists; the
        # context's own suffix therefore never matches itself.
        for end in range(max(self._cursor.length, self.min_ngram), len(context)):
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                key = tuple(context[end - n : end])
                ends = self._ends.get(key)
                if ends is None:
                    self._ends[key] = end
                elif isinstance(ends, list):
                    ends.append(end)
                    if len(ends) > self.max_occurrences:
                        del ends[0]
                else:
                    self._ends[key] = [ends, end] if self.max_occurrences > 1 else end
        self._cursor.advance(context)


class _Trie:
    """Token paths merged on their common prefixes, so siblings carry distinct tokens. Nodes are
    numbered in insertion order, which puts every parent before its children."""

    def __init__(self, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.token_ids: list[int] = []
        self.parents: list[int] = []
        self.match_lengths: list[int] = []  # of the suffix match whose copy added each node
        self._children: dict[tuple[int, int], int] = {}  # (parent, token) -> node

    def full(self) -> bool:
        return len(self.token_ids) >= self.max_nodes

    def insert(self, tokens: Sequence[int], match_length: int) -> None:
        """Add the path `tokens` (copied after a `match_length`-token suffix match) from the root,
        cut where the trie runs out of nodes."""
        node = ROOT
        for token in tokens:
            child = self._children.get((node, token))
            if child is None:
                if self.full():
                    return
                child = self._children[(node, token)] = len(self.token_ids)
                self.token_ids.append(token)
                self.parents.append(node)
                self.match_lengths.append(match_length)
            node = child


def copy_from(context: Sequence[int], start: int, budget: int) -> list[int]:
    """`budget` tokens of context + draft from `start` (< len(context)), as an LZ77 copy: past the
    end of the context the copy reads its own output, which extends a periodic pattern."""
    tokens = list(context[start : start + budget])
    period = len(context) - start
    while len(tokens) < budget:
        tokens.append(tokens[len(tokens) - period])
    return tokens

"""Overlapped drafting: draft round n+1 while the verifier is still checking round n.

A single-process engine drafts and verifies in turn; with the drafter in its own service, the
drafter is idle while the verifier runs round n's target pass. We spend that time drafting round
n+1 for the most likely outcome, that round n's primary path is accepted in full. The next
round's context then ends in the bonus token, which cannot be known in advance, so the pre-draft
goes one level deeper: it drafts past the assumed path, and its root children are guesses of the
bonus token (a token tree offers several). When the verdict arrives and the accepted path is the
assumed one and the bonus token is one of those children, the subtree under that child is round
n+1's draft, ready at once; otherwise it is discarded and round n+1 is drafted as usual.

Exactness is untouched: the verifier sees ordinary rounds, and the draft it gets is a function
of committed tokens only (the pre-draft was made from the context plus tokens that the verdict
then committed, and it is selected by the committed bonus token), with each node's q the
distribution it was drawn from given its path, as the verifier requires.

The pre-drafts use their own drafter instance: guessed contexts are rolled back on a miss, and an
incremental drafter re-indexes a context that does not extend its last one; kept apart, those
re-indexings happen in the overlapped time and never in the main drafter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from drafter_svc.draft_tree import primary_path, root_child, subtree
from drafter_svc.draft import Draft
from drafter_svc.drafter import Drafter, KeepDrafting


class Prefetcher:
    """Pre-drafts for one session: `start` after sending a round, `take` with its verdict. A model
    drafter's pre-drafts ask `keep_drafting` before each step, as its drafts do."""

    def __init__(self, drafter: Drafter, keep_drafting: KeepDrafting | None = None) -> None:
        self.drafter = drafter
        self.keep_drafting = keep_drafting
        self._assumed_path: list[int] | None = None
        self._draft: Draft | None = None
        self.last_seconds = 0.0  # time the last `start` took

    def start(self, context: Sequence[int], sent: Draft, budget: int, max_nodes: int) -> None:
        """Pre-draft the round after `sent`, assuming its primary path is accepted: a tree one
        level deeper than `budget` (its first level guesses the bonus token), with room for the
        guesses' subtrees. budget <= 0: nothing to pre-draft."""
        started = time.perf_counter()
        self._assumed_path, self._draft = None, None
        if budget > 0:
            path = primary_path(sent)
            assumed = [*context, *sent.path_tokens(path)]
            self._assumed_path = path
            self._draft = self.drafter.propose(assumed, budget + 1, 2 * max_nodes + 1, self.keep_drafting)
        self.last_seconds = time.perf_counter() - started

    def take(self, accepted_nodes: Sequence[int], next_token: int) -> Draft | None:
        """The pre-drafted round if the verdict (accepted path, then the recovered or bonus
        token) is one it assumed; None otherwise (the pre-draft is discarded)."""
        draft, assumed = self._draft, self._assumed_path
        self._assumed_path, self._draft = None, None
        if draft is None or assumed is None or list(accepted_nodes) != assumed:
            return None
        child = root_child(draft, next_token)
        if child is None:
            return None
        ahead = subtree(draft, child)
        return ahead if len(ahead) else None  # nothing drafted past the guess: draft afresh

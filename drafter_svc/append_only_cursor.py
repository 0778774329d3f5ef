"""How far an incremental drafter has indexed its session's append-only context."""

from __future__ import annotations

from collections.abc import Sequence


class AppendOnlyCursor:
    """How far a drafter has indexed an append-only context, and whether a new context extends it.

    The check compares the length and the last `window` indexed tokens, O(window) rather than
    O(len(context)): the session contract is append-only, and this catches the ways it could be
    broken in practice (a new session's context, a rollback). On failure the drafter re-indexes.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.length = 0
        self._tail: list[int] = []

    def extended_by(self, context: Sequence[int]) -> bool:
        start = self.length - len(self._tail)
        return len(context) >= self.length and list(context[start : self.length]) == self._tail

    def advance(self, context: Sequence[int]) -> None:
        self.length = len(context)
        self._tail = list(context[max(0, self.length - self.window) : self.length])

    def reset(self) -> None:
        self.length = 0
        self._tail = []

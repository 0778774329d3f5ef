"""Stop strings over streamed text: release what cannot be part of a stop string, end at the first.

Like vLLM's and text-generation-inference's stop sequences, on text rather than tokens: a stop
string may span several pushes, so the tail that could still begin one is held back until the
next push decides it. Generation ends at the first stop string to complete, as if the text came
one character at a time, so the outcome does not depend on how the text was chunked. The held
tail is the longest suffix that is a proper prefix of some stop string, hence never more than
max(len(stop)) - 1 characters.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStringMatcher:
    """Feed text deltas with `push`; the released text never contains a stop string.

    Empty strings in `stop` are ignored; with no stop strings every push is released whole.
    """

    def __init__(self, stop: Sequence[str]) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stop if s))
        self._longest = max((len(s) for s in self._stops), default=0)
        self._proper_prefixes = {s[:n] for s in self._stops for n in range(1, len(s))}
        self._held = ""
        self.stopped = False

    def push(self, text: str) -> tuple[str, bool]:
        """(text safe to release now, stopped). Once a stop string appears, the text before it
        and True; every later push returns ("", True)."""
        if self.stopped:
            return "", True
        pending = self._held + text
        # (end, start): the first stop string to complete; of those ending together, the longest.
        found = [(at + len(s), at) for s, at in ((s, pending.find(s)) for s in self._stops) if at >= 0]
        if found:
            _, start = min(found)
            self.stopped, self._held = True, ""
            return pending[:start], True
        held = self._held_length(pending)
        self._held = pending[len(pending) - held :] if held else ""
        return pending[: len(pending) - held], False

    def flush(self) -> str:
        """Release the held tail at the end of the text (no stop string matched)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _held_length(self, pending: str) -> int:
        """Length of the longest suffix of `pending` that a stop string starts with."""
        for n in range(min(len(pending), self._longest - 1), 0, -1):
            if pending[len(pending) - n :] in self._proper_prefixes:
                return n
        return 0

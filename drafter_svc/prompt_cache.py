"""What a model drafter's sessions read of their prompts, kept for later sessions that share it.

A model drafter's first call in a session reads the prompt (its window: onnx_drafter.py), a
prefill that costs what the target's costs. Sessions often share a prompt's beginning (a system
prompt, a chat template's header) or all of it (retries, several samples of one prompt, a
benchmark's repeats). PromptCache keeps, for each prompt read, the drafter's keys and values
after it and the logits after its last token (a prompt taken from the verifier comes without
them: onnx_drafter.py keeps it less its last token). A new session starts from the longest beginning
it shares with a kept prompt: a copy of that prompt's keys and values cut to the shared length
(a call may write into a cache in place: each session's and each kept prompt's are its own
memory), and, when the kept prompt is the session's whole read, its logits too, so that the
first call runs nothing.

Positions count from the start of what a session reads, so a kept prompt serves reads that start
with the same tokens. The bound is in tokens kept (the sum of the kept prompts' lengths), the
least recently used prompt dropped first. A session's q is then computed over the kept keys and
values and a call over the rest: the same logits summed in another split, which moves them by
float rounding as a rollback already does; exactness never depends on q (the verifier reads the
q that is sent). Thread-safe: a process's sessions share one PromptCache per model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from drafter_svc.draft_cache import MIN_SPARE_SLOTS, DraftCache


@dataclass(frozen=True)
class Reuse:
    """What a session may take over: the first `tokens` of its read, their keys and values, and
    the logits after its whole read when the kept prompt is all of it (else None)."""

    tokens: int
    cache: DraftCache
    logits: np.ndarray | None


class PromptCache:
    """Kept prompts: token ids -> (keys and values after them, logits after the last)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[int, ...], tuple[DraftCache, np.ndarray | None]] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    @property
    def tokens(self) -> int:
        """Tokens kept, over all prompts."""
        return self._tokens

    def reusable(self, read: Sequence[int]) -> int:
        """How many tokens of `read` `reuse` would hand over (all of them when a kept prompt is
        the whole read, with its logits), without handing them over."""
        with self._lock:
            return self._best(tuple(read))[0]

    def reuse(self, read: Sequence[int]) -> Reuse | None:
        """The longest beginning of `read` a kept prompt shares (None: none). Unless that prompt
        is the whole of `read`, the last token is left to run: its logits are needed."""
        wanted = tuple(read)
        with self._lock:
            shared, key = self._best(wanted)
            if key is None:
                return None
            self._kept.move_to_end(key)
            cache, logits = self._kept[key]
        whole = shared == len(wanted)  # room for the session's drafting after it:
        return Reuse(shared, cache.copy(shared, spare=MIN_SPARE_SLOTS), logits.copy() if whole and logits is not None else None)

    def _best(self, wanted: tuple[int, ...]) -> tuple[int, tuple[int, ...] | None]:
        """(tokens reusable, the kept prompt giving them; None and 0: none). Under the lock."""
        if wanted in self._kept and self._kept[wanted][1] is not None:
            return len(wanted), wanted
        best, best_key = 0, None
        for key in self._kept:
            shared = shared_length(key, wanted, len(wanted) - 1)
            if shared > best:
                best, best_key = shared, key
        return best, best_key

    def keep(self, read: Sequence[int], cache: DraftCache, logits: np.ndarray | None, max_tokens: int) -> None:
        """Keep a session's first read (its keys and values after `read`, at least that long, and
        the logits after its last token, or None: a session whose read is `read` itself then runs
        its last token again) within `max_tokens` kept tokens in all; a read longer than that is
        not kept."""
        key = tuple(read)
        if not key or len(key) > max_tokens:
            return
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return
            self._kept[key] = (cache.copy(len(key)), None if logits is None else logits.copy())
            self._tokens += len(key)
            while self._tokens > max_tokens:
                dropped, _ = self._kept.popitem(last=False)
                self._tokens -= len(dropped)


def shared_length(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens a and b share, at most `limit`."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i

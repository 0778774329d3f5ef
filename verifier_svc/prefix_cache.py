"""Prefix caching: the keys and values of earlier prompts, reused by sessions whose prompt starts
the same way (vLLM's automatic prefix caching, without paging).

A session's first round runs one target pass over its whole prompt. When many sessions share a
system prompt, a retrieved document or the earlier turns of a chat, that pass repeats the same
work. After its first round a session offers its prompt's entries here (`store`); a new session
takes the longest stored prefix of its prompt (`lookup`) and its first pass only covers the rest.

Exactness: an entry holds the keys and values a session computed for those very tokens at those
very positions (a prompt token never attends to the drafts of its pass), so a hit changes nothing
but floating-point summation order. Token ids are compared on every hit, never only hashed.

Entries are found at block boundaries (every `block_size` tokens) and at their full length, so a
prompt that extends a stored one (the next turn of a chat) reuses it up to the last boundary it
shares, and an identical prompt reuses all of it. The least recently used entries are evicted
beyond `max_tokens` tokens in all. Thread-safe: sessions look up on the event loop; the copies
(`StoredPrefix.fill`, `store`) run on the thread that runs the target (scheduler.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from verifier_svc.kv_cache import KVCache

DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True, eq=False)  # compared by identity
class _Entry:
    tokens: tuple[int, ...]  # the tokens whose entries these are, from position 0
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (keys, values): [batch, heads, len, dim]


@dataclass(frozen=True)
class StoredPrefix:
    """A hit: the first `length` entries of a stored entry's per-layer (keys, values). It keeps
    them alive if the entry is evicted before `fill` runs."""

    length: int
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    def fill(self, cache: KVCache) -> None:
        """Copy the prefix into the empty `cache` (on the thread that runs the target: scheduler.py)."""
        cache.fill(self.layers, self.length)


class PrefixCache:
    """Stored prompt prefixes, at most `max_tokens` tokens in all (0 turns it off)."""

    def __init__(self, max_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if max_tokens < 0 or block_size < 1:
            raise ValueError(f"need max_tokens >= 0 and block_size >= 1, got {max_tokens} and {block_size}")
        self.max_tokens = max_tokens
        self.block_size = block_size
        self.hits = 0
        self.reused_tokens = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()  # least recently used first
        self._index: dict[tuple[int, int], list[_Entry]] = {}  # (length, hash of that prefix) -> entries that long or longer
        self._stored_tokens = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Tokens stored."""
        return self._stored_tokens

    def lookup(self, prompt: Sequence[int]) -> StoredPrefix | None:
        """The longest stored prefix of prompt[:-1] (the last prompt token must stay pending: it is
        the root of the first round); None: a miss. Copies nothing (StoredPrefix.fill does)."""
        usable = len(prompt) - 1
        if not self.max_tokens or usable <= 0:
            return None
        with self._lock:
            for length, digest in self._prefix_keys(prompt, usable):
                prefix = tuple(prompt[:length])
                entry = next((e for e in self._index.get((length, digest), ()) if e.tokens[:length] == prefix), None)
                if entry is not None:
                    self._entries.move_to_end(entry.tokens)
                    self.hits += 1
                    self.reused_tokens += length
                    return StoredPrefix(length, entry.layers)
        return None

    def store(self, tokens: Sequence[int], cache: KVCache) -> None:
        """Keep copies of the cache's first len(tokens) entries, which must belong to `tokens`."""
        length = len(tokens)
        if not self.max_tokens or length == 0 or length > self.max_tokens:
            return
        assert len(cache) >= length, "the cache must hold entries for all the tokens"
        key = tuple(tokens)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
        with torch.inference_mode():
            layers = tuple(
                (layer.keys[..., :length, :].clone(), layer.values[..., :length, :].clone()) for layer in cache.cache.layers
            )
        entry = _Entry(key, layers)
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = entry
            self._stored_tokens += length
            for index_key in self._prefix_keys(key, length):
                self._index.setdefault(index_key, []).append(entry)
            while self._stored_tokens > self.max_tokens:
                self._evict(next(iter(self._entries.values())))

    def _evict(self, entry: _Entry) -> None:
        del self._entries[entry.tokens]
        self._stored_tokens -= len(entry.tokens)
        for index_key in self._prefix_keys(entry.tokens, len(entry.tokens)):
            entries = self._index[index_key]
            entries.remove(entry)
            if not entries:
                del self._index[index_key]

    def _prefix_keys(self, tokens: Sequence[int], length: int) -> list[tuple[int, int]]:
        """(n, hash of tokens[:n]) for each block boundary n <= length and for length itself, longest
        first. The hashes chain block by block, so this costs O(length)."""
        keys, digest = [], 0
        for n in range(self.block_size, length + 1, self.block_size):
            digest = hash((digest, tuple(tokens[n - self.block_size : n])))
            keys.append((n, digest))
        if length % self.block_size:
            keys.append((length, hash((digest, tuple(tokens[length - length % self.block_size : length])))))
        return keys[::-1]

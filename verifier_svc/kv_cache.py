"""A session's KV cache: transformers' DynamicCache plus the one operation we need, rollback."""

from __future__ import annotations

from transformers import DynamicCache, PretrainedConfig


class KVCache:
    """Keys and values of the tokens a session has committed, in sequence order."""

    def __init__(self, config: PretrainedConfig) -> None:
        self.cache = DynamicCache(config=config)

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    def truncate(self, length: int) -> None:
        """Drop every entry at position >= length (the rejected drafts of a round)."""
        excess = len(self) - length
        assert excess >= 0, "cannot truncate a cache to more entries than it has"
        if excess:
            self.cache.crop(-excess)

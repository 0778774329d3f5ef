"""A session's KV cache: transformers' DynamicCache plus the two operations we need, rollback and
keeping one accepted path of a token tree."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PretrainedConfig


def kv_bytes_per_token(config: PretrainedConfig, dtype: torch.dtype) -> int:
    """Bytes one cached token takes: layers x KV heads x head_dim x 2 (keys, values) x dtype size."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * heads * head_dim * 2 * dtype.itemsize


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

    @torch.inference_mode()
    def keep(self, start: int, offsets: Sequence[int]) -> None:
        """Keep the entries before `start` and, after them in this order, the entries at start +
        offsets (increasing: the accepted path of a tree pass, whose nodes follow `start`); drop
        the rest. The kept entries are gathered into place in each layer's tensors."""
        assert list(offsets) == sorted(set(offsets)), "offsets must be increasing"
        if list(offsets) != list(range(len(offsets))):  # a prefix of the nodes is already in place
            for layer in self.cache.layers:
                index = torch.tensor(offsets, dtype=torch.long, device=layer.keys.device) + start
                end = start + len(offsets)
                layer.keys[..., start:end, :] = layer.keys.index_select(-2, index)
                layer.values[..., start:end, :] = layer.values.index_select(-2, index)
        self.truncate(start + len(offsets))

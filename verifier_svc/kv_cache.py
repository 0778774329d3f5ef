"""A session's KV cache: transformers' DynamicCache plus the two operations we need, rollback and
keeping one accepted path of a token tree.

Each layer keeps its entries at the front of a buffer with spare room (GrowableLayer), so a pass
appends its new entries in place; DynamicLayer concatenates instead, copying the whole cache
(~46 KB per cached token for SmolLM2-135M in fp32) on every pass of every session."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

# When a layer's buffer is full it grows to the entries needed plus a quarter (at least this
# many slots): a prefill's buffer has room for the decoding after it, and a growth's copy is paid
# once per quarter of the length, not once per pass.
MIN_SPARE_SLOTS = 64


def buffer_slots(entries: int) -> int:
    """The slots a layer's buffers get when they must hold `entries`: those plus the spare room."""
    return entries + max(MIN_SPARE_SLOTS, entries // 4)


def kv_shape(config: PretrainedConfig) -> tuple[int, int]:
    """(KV heads, head_dim) of each layer's cached keys and values."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return heads, head_dim


def kv_bytes_per_token(config: PretrainedConfig, dtype: torch.dtype) -> int:
    """Bytes one cached token takes: layers x KV heads x head_dim x 2 (keys, values) x dtype size."""
    heads, head_dim = kv_shape(config)
    return config.num_hidden_layers * heads * head_dim * 2 * dtype.itemsize


_EMPTY_CACHES: dict[int, tuple[PretrainedConfig, DynamicCache]] = {}


def _empty_cache(config: PretrainedConfig) -> DynamicCache:
    """transformers' DynamicCache for `config`, made once per config object (reading a config's
    layer types costs ~0.5 ms, paid otherwise by every new session): KVCache copies it shallowly
    and gives the copy layers of its own. Held with its config, so the id is never reused."""
    held = _EMPTY_CACHES.get(id(config))
    if held is None or held[0] is not config:
        held = _EMPTY_CACHES[id(config)] = (config, DynamicCache(config=config))
    return held[1]


class GrowableLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are views of the first entries of larger buffers:
    update writes into the spare room (growing the buffers when full; `reserve` grows them for a
    pass that writes its entries there itself, then `written_to`), crop only shortens the views.
    The contract of DynamicLayer is unchanged: keys/values hold exactly the entries. The spare
    room holds finite numbers (zeros, or entries cropped off): a pass that reads a whole buffer
    behind a mask (a static pass: static_pass.py) multiplies them by zero weights, and 0 x NaN is
    NaN."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if self._buffers is not None and self._buffers[0].shape[:2] != key_states.shape[:2]:
            self._buffers = None  # other heads: buffers of their own
        keys, values = self.reserve(end, key_states)
        keys[..., length:end, :] = key_states
        values[..., length:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def reserve(self, end: int, like: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The buffers, grown where they hold fewer than `end` entries (with spare room beyond,
        zeros; the entries kept): ([..., capacity >= end, d] keys, values). `like`: an entry
        tensor giving the heads, width, dtype and device of a layer that has no buffers yet."""
        if self._buffers is None or self._buffers[0].shape[-2] < end:
            like = self._buffers[0] if self._buffers is not None else like
            assert like is not None, "a layer without buffers needs entries to shape them"
            length = self.get_seq_length()
            shape = (*like.shape[:2], buffer_slots(end), like.shape[-1])
            keys = torch.empty(shape, dtype=like.dtype, device=like.device)
            values = torch.empty(shape, dtype=like.dtype, device=like.device)
            keys[..., end:, :] = 0  # finite: a pass may read the spare room behind its mask
            values[..., end:, :] = 0
            if length:
                keys[..., :length, :] = self.keys
                values[..., :length, :] = self.values
            self._buffers = (keys, values)
        return self._buffers

    def adopt(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold this (empty) layer's entries at the front of these buffers from now on."""
        self.device, self.is_initialized = keys.device, True
        self._buffers = (keys, values)
        self.keys, self.values = keys[..., :0, :], values[..., :0, :]

    def written_to(self, end: int) -> None:
        """The buffers hold entries up to `end`, written there by a pass that did not call update."""
        assert self._buffers is not None and end <= self._buffers[0].shape[-2]
        self.keys, self.values = self._buffers[0][..., :end, :], self._buffers[1][..., :end, :]

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self._buffers if self.is_initialized else None


@dataclass(frozen=True)
class PromptEntries:
    """A cache's first `tokens` entries, per layer bytes [heads, tokens, head_dim] of `dtype` in C
    order (verifier.proto, PromptCache): keys[i] and values[i] are layer i's."""

    tokens: int
    heads: int
    head_dim: int
    dtype: str
    keys: list[bytes]
    values: list[bytes]

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.keys)) + sum(map(len, self.values))


class KVCache:
    """Keys and values of the tokens a session has committed, in sequence order: every entry in
    every layer, sliding-window layers included (a pass's mask applies each layer's window:
    layer_masks.py), so a cached entry's slot is its position."""

    def __init__(self, config: PretrainedConfig, storage: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> None:
        """`storage`: per layer, keys and values buffers to keep the entries in (a device's
        preallocated slot: static_pass.CacheSlot); by default each layer allocates its own."""
        self.cache = copy.copy(_empty_cache(config))
        self.cache.layers = [GrowableLayer() for _ in self.cache.layers]
        self.storage = list(storage)
        for layer, (keys, values) in zip(self.cache.layers, self.storage):
            layer.adopt(keys, values)

    def fill(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        """Make the first `length` entries of `layers` (per layer keys, values [batch, heads,
        >= length, head_dim]) this empty cache's entries: copied into its storage where it has
        room, else into buffers of its own cut from one allocation, with the spare room an update
        would leave (a prefix-cache hit: two copies a layer, where updates allocate, zero and copy
        layer by layer)."""
        assert len(self) == 0, "fill fills an empty cache"
        if not self.storage or any(keys.shape[-2] < length for keys, _ in self.storage):
            shapes = [(*keys.shape[:2], buffer_slots(length), keys.shape[-1]) for keys, _ in layers]
            like = layers[0][0]
            block = torch.zeros(2 * sum(math.prod(shape) for shape in shapes), dtype=like.dtype, device=like.device)
            buffers = iter(block.split([math.prod(shape) for shape in shapes for _ in (0, 1)]))
            for layer, shape in zip(self.cache.layers, shapes):
                layer.adopt(next(buffers).view(shape), next(buffers).view(shape))
        for layer, (keys, values) in zip(self.cache.layers, layers):
            own_keys, own_values = layer.buffers()
            own_keys[..., :length, :] = keys[..., :length, :]
            own_values[..., :length, :] = values[..., :length, :]
            layer.written_to(length)

    def __len__(self) -> int:
        return self.cache.get_seq_length()

    def in_storage(self) -> bool:
        """Whether every layer still keeps its entries in the `storage` it was given (a layer
        that outgrows it moves to buffers of its own)."""
        return bool(self.storage) and all(
            layer.buffers() is not None and layer.buffers()[0] is keys for layer, (keys, _) in zip(self.cache.layers, self.storage)
        )

    def written_to(self, length: int) -> None:
        """Every layer's storage holds entries up to `length`, written there by a pass that did
        not go through the layers' update (a static pass, onnxruntime's step)."""
        for layer in self.cache.layers:
            layer.written_to(length)

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

    @torch.inference_mode()
    def prompt_entries(self, length: int) -> PromptEntries | None:
        """The first `length` entries of every layer as bytes, float16 where every value fits its
        range (half the bytes to send; its rounding, ~5e-4 relative, is far below an int8 copy's),
        else float32; None where a layer holds fewer or its entries are not [1, heads, tokens,
        head_dim] (one sequence)."""
        layers = self.cache.layers
        if not layers or any(getattr(layer, "keys", None) is None or layer.keys.dim() != 4 or layer.keys.shape[0] != 1 for layer in layers):
            return None
        if any(layer.keys.shape[-2] < length or layer.keys.shape[1:] != layers[0].keys.shape[1:] for layer in layers):
            return None
        entries = [t[0, :, :length, :] for layer in layers for t in (layer.keys, layer.values)]
        halves = [t.to(device="cpu", dtype=torch.float16) for t in entries]
        if all(bool(torch.isfinite(h).all()) for h in halves):
            dtype, data = "float16", [h.contiguous().numpy().tobytes() for h in halves]
        else:
            dtype, data = "float32", [t.to(device="cpu", dtype=torch.float32).contiguous().numpy().tobytes() for t in entries]
        heads, head_dim = layers[0].keys.shape[1], layers[0].keys.shape[3]
        return PromptEntries(length, heads, head_dim, dtype, data[0::2], data[1::2])

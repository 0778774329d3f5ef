"""Passes of fixed shapes over a session's preallocated cache slot: what a device graph records.

A `CacheSlot` is one session's KV storage of fixed capacity C, allocated once: per layer, keys
and values [1, kv_heads, C, head_dim]. The session's KVCache keeps its entries at the front of
these buffers (KVCache.adopt), so every other path (batched passes, keep, truncate, the prefix
cache) reads and writes them where they lie; a session that outgrows C moves to buffers of its
own (GrowableLayer grows) and its passes run eagerly from then on.

A `StaticPass` runs the model's own forward over T query rows against the first K entries of
one slot (K <= C: attention reads K keys, so a short session's pass does not pay for the whole
slot) with every tensor at a fixed shape and address: the ids [1, T], the positions [1, T], the
slot indices the T new entries are written to [T], and the additive masks [1, 1, T, K] (one per
layer type: the tree's mask within each layer's window, layer_masks.py). A pass of r <= T real
tokens after `start` cached ones loads these tensors (`load`); the forward writes all T new
entries at start..start+T-1 (the T - r padding entries land past the session's length, where
the next pass overwrites them; so start + T <= K) and its logits are the fixed output
[1, T, vocab], of which the caller reads the real rows. Nothing in the forward depends
on a Python value that changes between passes, so a device may record it once and replay it
(backends/cuda_graphs.py); run eagerly (`forward`), it computes the same thing.

Padding rows see the cache and themselves; no real row sees them. Hidden columns are the
dtype's minimum, as in every other pass (layer_masks.additive).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from transformers import DynamicCache, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from verifier_svc.kv_cache import KVCache, kv_shape
from verifier_svc.layer_masks import LayerWindows, model_masks


class CacheSlot:
    """Per layer, keys and values buffers [1, kv_heads, capacity, head_dim] of one session."""

    def __init__(self, config: PretrainedConfig, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        heads, head_dim = kv_shape(config)
        shape = (1, heads, capacity, head_dim)
        self.capacity = capacity
        self.layers = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(config.num_hidden_layers)
        ]


class _SlotLayer(DynamicLayer):
    """A layer of the static pass's cache: writes the pass's T new entries at the slot indices
    `write_at` [T] (a tensor the pass loads before each run) and returns the slot's first K
    entries (views of its buffers)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, write_at: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values, self.write_at = keys, values, write_at
        self.device, self.is_initialized = keys.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        self.keys.index_copy_(2, self.write_at, key_states)
        self.values.index_copy_(2, self.write_at, value_states)
        return self.keys, self.values


class _SlotCache(DynamicCache):
    def __init__(self, config: PretrainedConfig, slot: CacheSlot, keys: int, write_at: torch.Tensor) -> None:
        super().__init__(config=config)
        self.layers = [_SlotLayer(k[..., :keys, :], v[..., :keys, :], write_at) for k, v in slot.layers]


class StaticPass:
    """The model's forward over `tokens` query rows against the first `keys` entries of `slot`,
    at fixed shapes (see the module docstring). `load` then `forward`; a recorded pass replays
    `forward`."""

    def __init__(self, model: PreTrainedModel, layers: LayerWindows, slot: CacheSlot, tokens: int, keys: int) -> None:
        assert tokens <= keys <= slot.capacity
        self.model, self.layers, self.slot, self.tokens, self.keys = model, layers, slot, tokens, keys
        device, dtype = slot.layers[0][0].device, slot.layers[0][0].dtype
        self.dtype = dtype
        self.ids = torch.zeros(1, tokens, dtype=torch.long, device=device)
        self.positions = torch.zeros(1, tokens, dtype=torch.long, device=device)
        # Until loaded, its last entries: a pass recorded while a session holds the slot must not
        # write over the session's entries (a pass fits only where start + tokens <= keys).
        self.write_at = torch.arange(keys - tokens, keys, dtype=torch.long, device=device)
        empty = torch.zeros(1, tokens, keys, dtype=torch.bool)
        empty[0, :, 0] = True  # until loaded: every row sees one column
        masks = self._masks(empty, self.positions.cpu(), torch.arange(keys)[None])
        self.masks = {kind: mask.to(device) for kind, mask in masks.items()}
        self.cache = _SlotCache(model.config, slot, keys, self.write_at)
        self.logits: torch.Tensor | None = None  # [1, tokens, vocab]: the last forward's

    def _masks(self, mask: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor) -> dict[str, torch.Tensor]:
        """The additive masks on the CPU, by layer type ("": the model takes one mask)."""
        masks = model_masks(self.layers, mask, positions, keys, self.dtype, torch.device("cpu"))
        return masks if isinstance(masks, dict) else {"": masks}

    def fits(self, start: int, real: int) -> bool:
        """Whether a pass of `real` tokens after `start` cached ones runs as this one."""
        return real <= self.tokens and start + self.tokens <= self.keys

    def load(self, ids: Sequence[int], positions: torch.Tensor, mask: torch.Tensor, start: int) -> None:
        """Set the inputs of a pass of r = len(ids) real tokens after `start` cached entries:
        their [r] positions and their [r, start + r] bool mask (tree_attention_mask)."""
        real, tokens = len(ids), self.tokens
        assert self.fits(start, real), "a pass must fit the static shape"
        rows = torch.zeros(1, tokens, self.keys, dtype=torch.bool)
        rows[0, :real, : start + real] = mask
        rows[0, real:, :start] = True  # padding sees the cache and itself
        pad = torch.arange(real, tokens)
        rows[0, pad, start + pad] = True
        query = torch.cat([positions, positions[-1:].expand(tokens - real)])[None]
        keys = torch.arange(self.keys)
        keys[start : start + tokens] = query[0]  # an entry's position (windows read it)
        for kind, fresh in self._masks(rows, query, keys[None]).items():
            self.masks[kind].copy_(fresh, non_blocking=True)
        self.ids.copy_(torch.tensor([[*ids, *[ids[-1]] * (tokens - real)]]), non_blocking=True)
        self.positions.copy_(query, non_blocking=True)
        self.write_at.copy_(torch.arange(start, start + tokens), non_blocking=True)

    def forward(self) -> torch.Tensor:
        """Run the pass over the loaded inputs; [1, tokens, vocab] logits (kept in self.logits)."""
        masks = self.masks if "" not in self.masks else self.masks[""]
        self.logits = self.model(
            input_ids=self.ids,
            position_ids=self.positions,
            attention_mask=masks,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=self.tokens,
        ).logits
        return self.logits


class PassRunner(Protocol):
    """A loaded StaticPass run one way or another: `run` gives its [1, tokens, vocab] logits."""

    static: StaticPass

    def run(self) -> torch.Tensor: ...


class StaticLonePass:
    """A lone pass run as a static pass (backends/base.LonePass): its inputs loaded, the runner
    run, its real rows read, the session's cache told where its entries now end."""

    def __init__(self, runner: PassRunner) -> None:
        self.runner = runner

    def score(
        self, cache: KVCache, ids: Sequence[int], positions: torch.Tensor, mask: torch.Tensor, start: int, first_row: int,
        argmax_only: bool = False,
    ) -> torch.Tensor:
        self.runner.static.load(ids, positions, mask, start)
        logits = self.runner.run()[0, first_row : len(ids)]
        cache.written_to(start + len(ids))
        return logits


class EagerRunner:
    """A StaticPass's forward run as it is, each time."""

    def __init__(self, static: StaticPass) -> None:
        self.static = static

    def run(self) -> torch.Tensor:
        return self.static.forward()


class SlotPasses:
    """`slots` cache slots of `capacity` entries handed to sessions as they open (a session
    opened while all are taken keeps its cache in buffers of its own), and per slot one static
    pass for each size in `sizes` and each key length in `key_lengths(capacity, min_keys)`, made (and, by
    `make_runner`, recorded) on first use or by `prepare`. A lone pass of r tokens after `start`
    cached ones runs as the smallest size >= r over the fewest keys >= start + size. A slot
    returns to the pool when its session's cache is collected."""

    def __init__(
        self,
        model: PreTrainedModel,
        layers: LayerWindows,
        slots: int,
        capacity: int,
        sizes: Sequence[int],
        make_runner: Callable[[StaticPass], PassRunner] = EagerRunner,
        min_keys: int | None = None,
    ) -> None:
        self.model, self.layers, self.sizes, self.make_runner = model, layers, sorted(sizes), make_runner
        self.keys = key_lengths(capacity, MIN_KEYS if min_keys is None else min_keys)
        parameter = next(model.parameters())
        with torch.inference_mode(False):  # normal tensors: any path may write them in place
            self.slots = [CacheSlot(model.config, capacity, parameter.dtype, parameter.device) for _ in range(slots)]
        self.free = list(range(slots))
        self.held: weakref.WeakKeyDictionary[KVCache, int] = weakref.WeakKeyDictionary()
        self.runners: dict[tuple[int, int, int], PassRunner] = {}

    def new_cache(self) -> KVCache:
        """A session's cache, in a free slot where there is one."""
        if not self.free:
            return KVCache(self.model.config)
        index = self.free.pop()
        cache = KVCache(self.model.config, self.slots[index].layers)
        self.held[cache] = index
        weakref.finalize(cache, self.free.append, index)
        return cache

    def runner(self, cache: KVCache, start: int, real: int) -> PassRunner | None:
        """The runner of a lone pass of `real` tokens after `start` cached ones, or None where
        the cache holds no slot (any longer) or no static shape fits."""
        index = self.held.get(cache)
        if index is None or not cache.in_storage():
            return None
        size = next((s for s in self.sizes if s >= real), None)
        if size is None:
            return None
        keys = next((k for k in self.keys if k >= start + size), None)
        return None if keys is None else self._runner(index, size, keys)

    def _runner(self, index: int, size: int, keys: int) -> PassRunner:
        runner = self.runners.get((index, size, keys))
        if runner is None:
            with torch.inference_mode(False):  # its inputs normal tensors, loaded in any mode
                static = StaticPass(self.model, self.layers, self.slots[index], size, keys)
            runner = self.runners[index, size, keys] = self.make_runner(static)
        return runner

    def prepare(self) -> None:
        """Make every slot's runner of every shape now (at start, before serving)."""
        for index in range(len(self.slots)):
            for keys in self.keys:
                for size in self.sizes:
                    if size <= keys:
                        self._runner(index, size, keys)


# Key lengths of static passes: powers of two from this one up to a slot's capacity. Attention
# over the slot's first K entries costs what K costs, so a pass reads at most about twice its
# session's entries (measured on an H200, SmolLM2-135M in bfloat16 after 256 cached tokens: a
# replayed one-token pass took 9.8 ms over 4,096 keys and 3.6 ms over 512).
MIN_KEYS = 256


def key_lengths(capacity: int, smallest: int) -> list[int]:
    """`smallest`, twice that, ... below `capacity`, then `capacity`."""
    lengths = []
    keys = smallest
    while keys < capacity:
        lengths.append(keys)
        keys *= 2
    return [*lengths, capacity]

"""One target forward pass over the rounds of several sessions (batched verification).

Each session brings its own KV cache (length L_b), its pending tokens (committed, not yet
cached; the last is the tree's root) and its token tree (n_b nodes): T_b = pending_b + n_b new
tokens. The pass is padded, not ragged:

- keys: every cache is copied into a [B, heads, L, head_dim] tensor per layer, L = max L_b,
  session b's entries in slots [0, L_b) and masked-out padding in [L_b, L);
- queries: the new tokens at [B, T], T = max T_b, right-aligned: session b's real tokens at
  [T - T_b, T), padding before them, so that every session's root and nodes (the rows
  acceptance reads) are the last rows of its row and the model's `logits_to_keep` can keep them;
- mask: [B, T, L + T]. Row b is session b's own tree mask (tree_attention_mask) with its cached
  columns at [0, L_b) and its new columns at [L + T - T_b, L + T); a padding query sees only
  itself, and no real query sees a padding key; then each layer's window (layer_masks.py);
- positions: [B, T], session b's own tree_position_ids (padding repeats the first one).

Rotary embeddings are applied to keys as they are cached and positions are passed explicitly,
so moving a session's entries to other slots changes nothing: each real row computes what its
session's unbatched pass does, up to float rounding (other matrix shapes). The pass is the
model's own forward, so its logits are the model's (scaling, soft caps included) by
construction. Afterwards the T_b real new entries of each session are appended to its own
cache, exactly as TargetModel.score would have left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import model_masks
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import TokenTree, tree_attention_mask, tree_position_ids


@dataclass(frozen=True)
class PassInput:
    """One session's share of a batched pass."""

    cache: KVCache
    pending: Sequence[int]  # at least one token; the last one is the tree's root
    tree: TokenTree


def batch_shape(inputs: Sequence[PassInput], min_rows: int = 1) -> tuple[int, int]:
    """(L, T): the padded cache length and new-token length of a pass over `inputs`. T grows
    so that B * T >= min_rows (F.linear is slow on 2-3 rows on CPU: see CPU_MIN_PASS_TOKENS)."""
    cached = max(len(x.cache) for x in inputs)
    new = max(len(x.pending) + len(x.tree) for x in inputs)
    return cached, max(new, -(-min_rows // len(inputs)))


def batch_mask_and_positions(inputs: Sequence[PassInput], cached: int, new: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """([B, new, cached + new] bool mask, [B, new] int64 query positions, [B, cached + new]
    int64 key positions) for the padded layout described in the module docstring."""
    mask = torch.zeros(len(inputs), new, cached + new, dtype=torch.bool)
    positions = torch.zeros(len(inputs), new, dtype=torch.long)
    keys = torch.arange(cached + new).repeat(len(inputs), 1)  # a cached entry's slot is its position
    for b, x in enumerate(inputs):
        start, pending = len(x.cache), len(x.pending)
        first = new - pending - len(x.tree)  # the column of the session's first real token
        own = tree_attention_mask(x.tree, start, pending)  # [real, start + real]
        mask[b, first:, :start] = own[:, :start]
        mask[b, first:, cached + first :] = own[:, start:]
        pad = torch.arange(first)
        mask[b, pad, cached + pad] = True  # padding sees itself, so its softmax is defined
        positions[b, first:] = tree_position_ids(x.tree, start, pending)
        positions[b, :first] = positions[b, first]
        keys[b, cached:] = positions[b]
    return mask, positions, keys


class _SlotLayer(DynamicLayer):
    """A cache layer over a preallocated [B, heads, cached + new, head_dim] buffer whose first
    `cached` slots are filled: the pass writes its new entries in place instead of concatenating
    (DynamicLayer.update would copy every session's padded cache once more)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, cached: int) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.buffers, self.cached = (keys, values), cached
        self.keys, self.values = keys[:, :, :cached], values[:, :, :cached]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        end = self.cached + key_states.shape[-2]
        self.buffers[0][:, :, self.cached : end] = key_states
        self.buffers[1][:, :, self.cached : end] = value_states
        self.keys, self.values = self.buffers[0][:, :, :end], self.buffers[1][:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]


def _padded_cache(inputs: Sequence[PassInput], cached: int, new: int, target: TargetModel) -> DynamicCache:
    """A DynamicCache whose layers hold [B, heads, cached + new, head_dim] buffers, each
    session's entries first in its row (the rest zeros, masked out), room for the new tokens."""
    batch = DynamicCache(config=target.model.config)
    config = target.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (len(inputs), heads, cached + new, head_dim)
    for index in range(len(batch.layers)):
        # Uninitialized, then filled: each row's entries copied, only its padding slots [L_b, L)
        # zeroed (masked out, but garbage there could be inf or NaN, and 0 x NaN is NaN); slots
        # from L on are written by the pass itself. Zeroing whole buffers first wrote every slot twice.
        keys = torch.empty(shape, dtype=target.dtype, device=target.device)
        values = torch.empty(shape, dtype=target.dtype, device=target.device)
        for b, x in enumerate(inputs):
            length = len(x.cache)
            if length:
                source = x.cache.cache.layers[index]
                keys[b, :, :length] = source.keys[0]
                values[b, :, :length] = source.values[0]
            keys[b, :, length:cached] = 0
            values[b, :, length:cached] = 0
        batch.layers[index] = _SlotLayer(keys, values, cached)
    return batch


@torch.inference_mode()
def score_batch(target: TargetModel, inputs: Sequence[PassInput]) -> list[torch.Tensor]:
    """One forward pass over all sessions' pending tokens and trees. Returns, per session, its
    [n_b + 1, vocab] float32 CPU logits (row 0 after the root, row i + 1 after node i) and
    appends its pending_b + n_b new entries to its cache: the contract of TargetModel.score,
    for every session at once. Sessions must be distinct."""
    assert len({id(x.cache) for x in inputs}) == len(inputs), "one round per session per pass"
    cached, new = batch_shape(inputs, target.min_pass_tokens)
    mask, positions, keys = batch_mask_and_positions(inputs, cached, new)
    ids = torch.zeros(len(inputs), new, dtype=torch.long)
    for b, x in enumerate(inputs):
        tokens = [*x.pending, *x.tree.tokens.tolist()]
        ids[b, new - len(tokens) :] = torch.tensor(tokens)
        ids[b, : new - len(tokens)] = tokens[0]
    masks = model_masks(target.layers, mask, positions, keys, target.dtype, target.device)
    batch_cache = _padded_cache(inputs, cached, new, target)
    # The output head runs on the last `kept` rows of each session: its root and nodes, the rows
    # acceptance reads (and, behind a smaller tree, a few rows before them).
    kept = max(len(x.tree) + 1 for x in inputs)
    with target.kernels():
        logits = target.model(
            input_ids=ids.to(target.device),
            position_ids=positions.to(target.device),
            attention_mask=masks,
            cache=batch_cache,
            use_cache=True,
            logits_to_keep=kept,
        ).logits.float().cpu()  # [B, kept, vocab]
    for index, layer in enumerate(batch_cache.layers):
        for b, x in enumerate(inputs):
            first = new - len(x.pending) - len(x.tree)
            x.cache.cache.update(layer.keys[b : b + 1, :, cached + first : cached + new], layer.values[b : b + 1, :, cached + first : cached + new], index)
    return [logits[b, kept - len(x.tree) - 1 :] for b, x in enumerate(inputs)]

"""One target forward pass over the rounds of several sessions (batched verification).

Each session brings its own KV cache (length L_b), its pending tokens (committed, not yet
cached; the last is the tree's root) and its token tree (n_b nodes): T_b = pending_b + n_b new
tokens. The linear layers run over all sessions' new tokens at once, padded; attention runs per
session over that session's cache where it lies (session_attention.py):

- queries: the new tokens at [B, T], T = max T_b, right-aligned: session b's real tokens at
  [T - T_b, T), padding before them, so that every session's root and nodes (the rows
  acceptance reads) are the last rows of its row and the model's `logits_to_keep` can keep them;
- keys: session b's own, in its own cache: its L_b cached entries, then its T_b new ones,
  written there in place by the pass. No cache is copied, and the pass allocates nothing
  proportional to the cached entries but its mask;
- mask: [B, T, L + T], L = max L_b. Row b is session b's own tree mask (tree_attention_mask),
  its columns at [0, L_b + T_b): the slots of b's cache after the pass; the rest is hidden.
  Then each layer's window (layer_masks.py);
- positions: [B, T], session b's own tree_position_ids (padding repeats the first one).

Each real row computes what its session's unbatched pass does, up to float rounding (other
matrix shapes in the linear layers; attention is the same function over the same tensors). The
pass is the model's own forward, so its logits are the model's (scaling, soft caps included) by
construction, and each cache ends as TargetModel.score would have left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import model_masks
from verifier_svc.session_attention import SessionCache, SessionRows, session_attention
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
    int64 key positions) for the layout described in the module docstring."""
    mask = torch.zeros(len(inputs), new, cached + new, dtype=torch.bool)
    positions = torch.zeros(len(inputs), new, dtype=torch.long)
    keys = torch.zeros(len(inputs), cached + new, dtype=torch.long)  # hidden columns: position 0
    for b, x in enumerate(inputs):
        start, real = len(x.cache), len(x.pending) + len(x.tree)
        first = new - real  # the row of the session's first real token
        mask[b, first:, : start + real] = tree_attention_mask(x.tree, start, len(x.pending))
        mask[b, :first, 0] = True  # padding rows (never computed) see one column
        positions[b, first:] = tree_position_ids(x.tree, start, len(x.pending))
        positions[b, :first] = positions[b, first]
        keys[b, :start] = torch.arange(start)  # a cached entry's slot is its position
        keys[b, start : start + real] = positions[b, first:]
    return mask, positions, keys


@torch.inference_mode()
def score_batch(target: TargetModel, inputs: Sequence[PassInput]) -> list[torch.Tensor]:
    """One forward pass over all sessions' pending tokens and trees. Returns, per session, its
    [n_b + 1, vocab] float32 CPU logits (row 0 after the root, row i + 1 after node i) and
    appends its pending_b + n_b new entries to its cache, in place: the contract of TargetModel.score,
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
    sessions = [SessionRows(x.cache, len(x.pending) + len(x.tree)) for x in inputs]
    # The output head runs on the last `kept` rows of each session: its root and nodes, the rows
    # acceptance reads (and, behind a smaller tree, a few rows before them).
    kept = max(len(x.tree) + 1 for x in inputs)
    with target.kernels(), session_attention(target.model, sessions):
        logits = target.model(
            input_ids=ids.to(target.device),
            position_ids=positions.to(target.device),
            attention_mask=masks,
            cache=SessionCache(target.model.config, sessions, cached),
            use_cache=True,
            logits_to_keep=kept,
        ).logits.float().cpu()  # [B, kept, vocab]
    return [logits[b, kept - len(x.tree) - 1 :] for b, x in enumerate(inputs)]

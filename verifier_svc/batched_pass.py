"""One target forward pass over the rounds of several sessions (batched verification).

Each session brings its own KV cache (length L_b), its pending tokens (committed, not yet
cached; the last is the tree's root) and its token tree (n_b nodes): T_b = pending_b + n_b new
tokens. The pass is one sequence of packed rows: the linear layers run over R = sum T_b rows,
with no padding between sessions (a session's drafted node costs one row, not one per session);
attention runs per session over that session's cache where it lies (session_attention.py):

- queries: [1, R'] rows, session b's T_b tokens at [o_b, o_b + T_b), in the inputs' order, then
  R' - R padding rows where the backend pads small passes (min_rows: F.linear is slow on 2-3
  rows on CPU, see CPU_MIN_PASS_TOKENS);
- keys: session b's own, in its own cache: its L_b cached entries, then its T_b new ones,
  written there in place by the pass. No cache is copied, and the pass allocates nothing
  proportional to the cached entries but its mask;
- mask: [1, 1, R', W], W = max (L_b + T_b). Each row's columns are its own session's key slots:
  row o_b + i is session b's tree mask row i (tree_attention_mask) at columns [0, L_b + T_b),
  the rest hidden; then each layer's window (layer_masks.py), from each row's own key positions;
- positions: [1, R'], session b's own tree_position_ids (padding rows at position 0).

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


def packed_rows(inputs: Sequence[PassInput], min_rows: int = 1) -> tuple[list[int], int]:
    """(each session's first row, R'): the packed layout of a pass over `inputs` (module
    docstring), R' = max(R, min_rows)."""
    offsets, rows = [], 0
    for x in inputs:
        offsets.append(rows)
        rows += len(x.pending) + len(x.tree)
    return offsets, max(rows, min_rows)


def batch_mask_and_positions(inputs: Sequence[PassInput], offsets: Sequence[int], rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """([R', W] bool mask, [R'] int64 query positions, [R', W] int64 key positions: each row's
    own session's) for the packed layout of the module docstring."""
    width = max(len(x.cache) + len(x.pending) + len(x.tree) for x in inputs)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    positions = torch.zeros(rows, dtype=torch.long)
    keys = torch.zeros(rows, width, dtype=torch.long)  # hidden columns: position 0
    mask[offsets[-1] + len(inputs[-1].pending) + len(inputs[-1].tree) :, 0] = True  # padding (never computed) sees one column
    for first, x in zip(offsets, inputs):
        start, real = len(x.cache), len(x.pending) + len(x.tree)
        own = slice(first, first + real)
        mask[own, : start + real] = tree_attention_mask(x.tree, start, len(x.pending))
        positions[own] = tree_position_ids(x.tree, start, len(x.pending))
        keys[own, :start] = torch.arange(start)  # a cached entry's slot is its position
        keys[own, start : start + real] = positions[own]
    return mask, positions, keys


def packed_masks(target: TargetModel, mask: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
    """The model's `attention_mask` for a packed pass: layer_masks.model_masks with each row as
    its own batch of one query (its own key positions), laid out as [1, 1, R', W]."""
    masks = model_masks(target.layers, mask[:, None], positions[:, None], keys, target.dtype, target.device)
    if isinstance(masks, dict):
        return {kind: m.view(1, 1, *mask.shape) for kind, m in masks.items()}
    return masks.view(1, 1, *mask.shape)


@torch.inference_mode()
def score_batch(target: TargetModel, inputs: Sequence[PassInput]) -> list[torch.Tensor]:
    """One forward pass over all sessions' pending tokens and trees. Returns, per session, its
    [n_b + 1, vocab] float32 CPU logits (row 0 after the root, row i + 1 after node i) and
    appends its pending_b + n_b new entries to its cache, in place: the contract of TargetModel.score,
    for every session at once. Sessions must be distinct."""
    assert len({id(x.cache) for x in inputs}) == len(inputs), "one round per session per pass"
    offsets, rows = packed_rows(inputs, target.min_pass_tokens)
    mask, positions, keys = batch_mask_and_positions(inputs, offsets, rows)
    ids = torch.zeros(1, rows, dtype=torch.long)
    kept = []  # the rows acceptance reads: each session's root and nodes, its last n_b + 1
    for first, x in zip(offsets, inputs):
        tokens = [*x.pending, *x.tree.tokens.tolist()]
        ids[0, first : first + len(tokens)] = torch.tensor(tokens)
        kept.extend(range(first + len(x.pending) - 1, first + len(tokens)))
    sessions = [SessionRows(x.cache, len(x.pending) + len(x.tree), first) for first, x in zip(offsets, inputs)]
    with target.kernels(), session_attention(target.model, sessions):
        logits = target.model(
            input_ids=ids.to(target.device),
            position_ids=positions[None].to(target.device),
            attention_mask=packed_masks(target, mask, positions, keys),
            cache=SessionCache(target.model.config, sessions, max(len(x.cache) for x in inputs)),
            use_cache=True,
            logits_to_keep=torch.tensor(kept, device=target.device),
        ).logits[0].float().cpu()  # [sum (n_b + 1), vocab]
    return list(logits.split([len(x.tree) + 1 for x in inputs]))

"""The I/O contracts of the ONNX step graphs that `specdec draft build` writes and
drafter_svc/draft_cache.py runs (L layers, H KV heads of width D, vocabulary V; all axes named
here are dynamic). Two contracts, one per graph; the manifest's `model.cache` names a build's:

inputs, both
  input_ids        int64   [1, n]              the new tokens
  position_ids     int64   [1, n]              their positions (past + depth in a token tree)
  attention_bias   float32 [1, 1, n, past + n] added to the attention scores: 0 where a new
                                               token may attend (cached entry or new token), a large
                                               negative number where not (causal chain, tree mask)
  logits_index     int64   [m]                 which of the n new positions get logits (m >= 1)
outputs, both
  logits           float32 [1, m, V]           next-token logits after each chosen position

`concatenated` (the generic graph: generic_export.py)
  past_key.{i}     float32 [1, H, past, D]     inputs, for i in 0..L-1 (past may be 0)
  past_value.{i}   float32 [1, H, past, D]
  present_key.{i}  float32 [1, H, past + n, D] outputs: past followed by the new tokens' entries
  present_value.{i}

`in_place` (the Llama graph: llama_graph.py, its attention fused_attention.py's node)
  seqlens_k        int32   [1]                 past + n - 1
  total_length     int32   []                  past + n
  cache_key.{i}    float32 [1, H, C, D]        inputs: a layer's whole key and value buffers,
  cache_value.{i}  float32 [1, H, C, D]        capacity C >= past + n, entries [0, past) held
  present_key.{i}  float32 [1, H, C, D]        outputs, bound to the same memory as the inputs:
  present_value.{i}                            the n new entries written at [past, past + n)

The batch is 1 (a drafter runs one sequence a call). The mask is data (a tree needs no special
kernel). Cache entry j holds position j: the drafter keeps a chain in its cache and rolls it
back by shortening it (a tree's nodes are dropped before the next call). A layer with a sliding
window adds its window to `attention_bias` inside the graph, from these positions.
"""

from __future__ import annotations

import torch

from drafter_svc.draft_cache import CONCATENATED, IN_PLACE, cache_names

OPSET = 17  # of the hand-written Llama graph (TorchScript exporter)
DYNAMO_OPSET = 18  # of the generic graph (the dynamo exporter's own opset)
MODEL_FILE = "model.onnx"


def causal_bias(past: int, n: int, batch: int = 1) -> torch.Tensor:
    """[batch, 1, n, past + n] float32: every new token attends to the cache and to itself and the
    new tokens before it."""
    allowed = torch.ones(n, past + n).tril(diagonal=past).bool()
    bias = torch.zeros(n, past + n).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return bias.expand(batch, 1, n, past + n).contiguous()


def io_names(num_layers: int, cache: str = CONCATENATED) -> tuple[list[str], list[str]]:
    """(input names, output names) of `cache`'s contract in the module docstring."""
    inputs = ["input_ids", "position_ids", "attention_bias", "logits_index"]
    if cache == IN_PLACE:
        inputs += ["seqlens_k", "total_length"]
    entries, presents = cache_names(num_layers, cache)
    return [*inputs, *entries], ["logits", *presents]

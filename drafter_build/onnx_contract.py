"""The I/O contract of every ONNX drafter model that `specdec draft build` writes and
drafter_svc/onnx_drafter.py runs (L layers, H KV heads of width D, vocabulary V; all axes named
here are dynamic):

inputs
  input_ids        int64   [batch, n]          the new tokens
  position_ids     int64   [batch, n]          their positions (past + depth in a token tree)
  attention_bias   float32 [batch, 1, n, past + n]  added to the attention scores: 0 where a new
                                               token may attend (cached entry or new token), a large
                                               negative number where not (causal chain, tree mask)
  logits_index     int64   [m]                 which of the n new positions get logits (m >= 1)
  past_key.{i}     float32 [batch, H, past, D] for i in 0..L-1 (past may be 0)
  past_value.{i}   float32 [batch, H, past, D]
outputs
  logits           float32 [batch, m, V]       next-token logits after each chosen position
  present_key.{i}  float32 [batch, H, past + n, D]  past followed by the new tokens' keys
  present_value.{i} float32 [batch, H, past + n, D]

`batch` is 1 (the drafter runs one sequence a call). The cache is plain tensors and the mask is
data (a tree needs no special kernel). Cache entry j holds position j: the drafter keeps a chain in
its cache and rolls it back by slicing the `past` axis (a tree's nodes are sliced off before the
next call). A layer with a sliding window adds its window to `attention_bias` inside the graph,
from these positions.
"""

from __future__ import annotations

import torch

OPSET = 17  # of the hand-written Llama graph (TorchScript exporter)
DYNAMO_OPSET = 18  # of the generic graph (the dynamo exporter's own opset)
MODEL_FILE = "model.onnx"


def causal_bias(past: int, n: int, batch: int = 1) -> torch.Tensor:
    """[batch, 1, n, past + n] float32: every new token attends to the cache and to itself and the
    new tokens before it."""
    allowed = torch.ones(n, past + n).tril(diagonal=past).bool()
    bias = torch.zeros(n, past + n).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return bias.expand(batch, 1, n, past + n).contiguous()


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of the contract in the module docstring."""
    past = [f"past_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    present = [f"present_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    return ["input_ids", "position_ids", "attention_bias", "logits_index", *past], ["logits", *present]

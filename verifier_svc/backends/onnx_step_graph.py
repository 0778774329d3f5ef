"""The ONNX graph of a target step that onnxruntime runs for the CPU backend's lone passes
(onnx_passes.py): the drafters' hand-written Llama step (drafter_build/llama_graph.py, the
model's own modules with the attention written out) reading a session's cache where it lies.

inputs
  input_ids       int64   [1, n]              the pass's tokens
  position_ids    int64   [1, n]              their positions
  attention_bias  float32 [1, 1, n, C + n]    0 where a token may attend, the float32 minimum
                                              where not: C cache columns (entries at or past the
                                              session's length hidden), then the n new tokens
  logits_index    int64   [m]                 the rows whose logits are wanted
  cache_key.{i}   float32 [1, H, C, D]        layer i's whole key buffer (GrowableLayer's), C its
  cache_value.{i} float32 [1, H, C, D]        capacity, bound in place: nothing is copied in
outputs
  logits          float32 [1, m, V]
  new_key.{i}     float32 [1, H, n, D]        the pass's entries, which the caller writes into
  new_value.{i}   float32 [1, H, n, D]        the cache (KVCache's layers, in place)

Unlike the drafters' graph (past and present concatenated, a copy of the whole cache a call), the
scores of the cache and of the new tokens are two products and the output sums two products, so a
call reads the cache once and writes only the new entries.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from drafter_build.llama_graph import KVCacheLlama, export_step, grouped_attention, is_llama_layout


def served_layout(model: nn.Module) -> bool:
    """Whether this graph computes `model`'s step: exactly transformers' LlamaForCausalLM (no
    sliding windows, no logit scaling) in float32."""
    return is_llama_layout(model) and next(model.parameters()).dtype == torch.float32


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of the contract in the module docstring."""
    cache = [f"cache_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    new = [f"new_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    return ["input_ids", "position_ids", "attention_bias", "logits_index", *cache], ["logits", *new]


class InPlaceCacheLlama(KVCacheLlama):
    """KVCacheLlama whose layers read the cache's whole buffers and return only the new entries."""

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached_k: torch.Tensor, cached_v: torch.Tensor, bias: torch.Tensor,
        scaling: float, groups: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        columns = cached_k.shape[2]
        scores = torch.cat([torch.matmul(q, cached_k.transpose(2, 3)), torch.matmul(q, k.transpose(2, 3))], dim=-1) * scaling
        weights = grouped_attention(scores, bias, groups)
        return weights[..., :columns].matmul(cached_v) + weights[..., columns:].matmul(v), [k, v]


def export_step_graph(model: nn.Module, path: Path) -> Path:
    """Write `path` for `model` (served_layout) with its weights as they are now."""
    inputs, outputs = io_names(model.config.num_hidden_layers)
    axes = {**{name: {2: "capacity"} for name in inputs[4:]}, **{name: {2: "n"} for name in outputs[1:]}}
    return export_step(InPlaceCacheLlama(model), path, inputs, outputs, axes, past_len=3)

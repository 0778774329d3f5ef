"""The ONNX graph of a target step that onnxruntime runs for the CPU backend's lone passes
(onnx_passes.py): the drafters' hand-written Llama step (drafter_build/llama_graph.py, the
model's own modules) with each layer's attention one onnxruntime GroupQueryAttention node that
reads a session's cache where it lies and writes the pass's entries into it.

inputs
  input_ids       int64   [1, n]              the pass's tokens
  position_ids    int64   [1, n]              their positions
  attention_bias  float32 [1, 1, n, L + n]    0 where a token may attend, the float32 minimum
                                              where not: the session's L cached entries, then the
                                              n new tokens (a token tree's mask)
  logits_index    int64   [m]                 the rows whose logits are wanted
  seqlens_k       int32   [1]                 L + n - 1
  total_length    int32   []                  L + n
  cache_key.{i}   float32 [1, H, C, D]        layer i's whole key buffer (GrowableLayer's), C its
  cache_value.{i} float32 [1, H, C, D]        capacity >= L + n, bound in place
outputs
  logits          float32 [1, m, V]
  present_key.{i}   float32 [1, H, C, D]      the same buffers, bound to the same memory: the
  present_value.{i} float32 [1, H, C, D]      node writes the n new entries at [L, L + n)

GroupQueryAttention (com.microsoft) with past and present sharing one buffer reads the L cached
entries where they lie, applies its causal mask and the bias (a tree hides a node's non-ancestors
beyond causal order), and writes only the new entries: nothing is copied, and a pass reads L
entries, not the buffer's capacity. One fused node a layer instead of a dozen small ones
(docs/design/onnx-passes.md).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from drafter_build.llama_graph import KVCacheLlama, export_step, is_llama_layout

CONTRIB_DOMAIN = "com.microsoft"


def served_layout(model: nn.Module) -> bool:
    """Whether this graph computes `model`'s step: exactly transformers' LlamaForCausalLM (no
    sliding windows, no logit scaling) in float32."""
    return is_llama_layout(model) and next(model.parameters()).dtype == torch.float32


def io_names(num_layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of the contract in the module docstring."""
    cache = [f"cache_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    present = [f"present_{kind}.{i}" for i in range(num_layers) for kind in ("key", "value")]
    return ["input_ids", "position_ids", "attention_bias", "logits_index", "seqlens_k", "total_length", *cache], ["logits", *present]


class GroupQueryAttention(torch.autograd.Function):
    """onnxruntime's GroupQueryAttention node in an exported graph. Its forward only gives the
    outputs' shapes for tracing: the graph is run by onnxruntime, never by torch."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached_k: torch.Tensor, cached_v: torch.Tensor, seqlens_k: torch.Tensor,
        total_length: torch.Tensor, bias: torch.Tensor, heads: int, kv_heads: int, scaling: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.zeros_like(q), cached_k.clone(), cached_v.clone()

    @staticmethod
    def symbolic(g, q, k, v, cached_k, cached_v, seqlens_k, total_length, bias, heads: int, kv_heads: int, scaling: float):  # type: ignore[no-untyped-def]
        from torch.onnx._internal.torchscript_exporter.symbolic_helper import _optional_input_placeholder_tensor

        none = _optional_input_placeholder_tensor(g)  # cos_cache, sin_cache, position_ids: the rotary embedding is the graph's
        return g.op(
            f"{CONTRIB_DOMAIN}::GroupQueryAttention", q, k, v, cached_k, cached_v, seqlens_k, total_length, none, none, none, bias,
            num_heads_i=heads, kv_num_heads_i=kv_heads, scale_f=scaling, outputs=3,
        )


class InPlaceCacheLlama(KVCacheLlama):
    """KVCacheLlama whose layers attend through GroupQueryAttention over the cache's buffers."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_bias: torch.Tensor, logits_index: torch.Tensor,
        seqlens_k: torch.Tensor, total_length: torch.Tensor, *cache: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        heads, kv_heads, d = self.num_heads, self.num_kv_heads, self.head_dim

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
            def rows(x: torch.Tensor, width: int) -> torch.Tensor:  # [1, h, n, d] -> [1, n, h d]
                return x.transpose(1, 2).reshape(1, -1, width * d)

            out, keys, values = GroupQueryAttention.apply(
                rows(q, heads), rows(k, kv_heads), rows(v, kv_heads), cache[2 * i], cache[2 * i + 1], seqlens_k, total_length,
                attention_bias, heads, kv_heads, scaling,
            )
            return out.view(1, -1, heads, d).transpose(1, 2), [keys, values]

        return self.step(input_ids, position_ids, logits_index, attend)


def export_step_graph(model: nn.Module, path: Path) -> Path:
    """Write `path` for `model` (served_layout) with its weights as they are now."""
    inputs, outputs = io_names(model.config.num_hidden_layers)
    axes = {name: {2: "capacity"} for name in [*inputs[6:], *outputs[1:]]}
    return export_step(InPlaceCacheLlama(model), path, inputs, outputs, axes, past_len=3, lengths=True)

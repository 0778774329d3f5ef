"""The hand-written ONNX graph of a LlamaForCausalLM step (the `in_place` I/O contract of
drafter_build/onnx_contract.py): the model's own modules (embedding, RMSNorms, projections,
MLPs, head) with each layer's attention one fused node that applies the rotary embedding, reads
the cache where it lies and writes the step's entries into it (fused_attention.py), built with
few nodes because a one-token call is mostly small nodes around the products: projections that
read the same input stacked into one, no reshapes and no shape arithmetic. It serves only the exact Llama layout
(`is_llama_layout`); every other architecture goes through generic_export.py, and both pass the
same check (export_check.py). The model drafters run it in int8 (onnx_export.quantize_int8) and
the verifier's onnxruntime passes in float32 (verifier_svc/backends/onnx_passes.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from drafter_build.fused_attention import GroupQueryAttention
from drafter_build.onnx_contract import IN_PLACE, OPSET, causal_bias, io_names

# The graph's version, recorded in the manifest: raised whenever this graph changes, so that
# `specdec draft build` rebuilds a drafter built before. 5: the fused node's output declares its
# own shape (onnxruntime warned at every load of a version-4 build); 4: the fused node applies the rotary
# embedding and reads q, k and v packed; 3: each layer's attention is one fused node over the
# cache's buffers, written in place (the in_place contract); 2: q, k and v one product, as are
# the MLP's gate and up. The measurements: docs/design/drafter-export.md.
GRAPH_VERSION = 5
CACHE = IN_PLACE
# Rotary embeddings whose tables depend on the sequence's length (transformers'
# dynamic_rope_update): not a table of positions made once, so not this graph's.
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


def is_llama_layout(model: nn.Module) -> bool:
    """Whether `model` is exactly transformers' LlamaForCausalLM, the module tree this graph reads
    (a subclass or a relative with the same names may compute something else), with a rotary
    embedding of fixed tables."""
    from transformers import LlamaForCausalLM

    rope = str(getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "rope_type", "default"))
    return type(model) is LlamaForCausalLM and not any(kind in rope for kind in LENGTH_DEPENDENT_ROPE)


class KVCacheLlama(nn.Module):
    """A LlamaForCausalLM step over its layers' cache buffers: (ids, positions, bias,
    logits_index, seqlens_k, total_length, *buffers) -> (logits, *buffers), the buffers
    interleaved as key.0, value.0, key.1, ... (the in_place contract)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        config = model.config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # Each layer's q, k and v projections as one product, and its MLP's gate and up
        # projections as another: fewer, wider products (the same numbers: a product's columns,
        # and each column's int8 blocks, do not depend on the others).
        attns, mlps = [layer.self_attn for layer in model.model.layers], [layer.mlp for layer in model.model.layers]
        self.qkv = nn.ModuleList(_stacked([attn.q_proj, attn.k_proj, attn.v_proj]) for attn in attns)
        self.gate_up = nn.ModuleList(_stacked([mlp.gate_proj, mlp.up_proj]) for mlp in mlps)
        # The rotary embedding's cos and sin at every position the model takes, [positions, d / 2]
        # (the halves of transformers' tables repeat: cat(freqs, freqs)), for the fused node.
        positions = config.max_position_embeddings
        cos, sin = model.model.rotary_emb(torch.zeros(1, positions, self.head_dim), torch.arange(positions)[None])
        self.register_buffer("cos", cos[0, :, : self.head_dim // 2].contiguous())
        self.register_buffer("sin", sin[0, :, : self.head_dim // 2].contiguous())

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_bias: torch.Tensor, logits_index: torch.Tensor,
        seqlens_k: torch.Tensor, total_length: torch.Tensor, *cache: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """The step of n tokens ([1, n] ids and positions; a batch of one)."""
        hidden, present = self.trunk(input_ids, position_ids, attention_bias, seqlens_k, total_length, cache)
        return (self.model.lm_head(hidden.index_select(1, logits_index)), *present)

    def trunk(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_bias: torch.Tensor, seqlens_k: torch.Tensor,
        total_length: torch.Tensor, cache: tuple[torch.Tensor, ...],
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(the final norm's output [1, n, hidden], the layers' present buffers) of the step."""
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)  # [1, n, hidden]
        present: list[torch.Tensor] = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            out, keys, values = GroupQueryAttention.apply(
                self.qkv[i](layer.input_layernorm(hidden)), cache[2 * i], cache[2 * i + 1], seqlens_k, total_length, self.cos, self.sin,
                position_ids, attention_bias, self.num_heads, self.num_kv_heads, attn.scaling,
            )
            present += [keys, values]
            hidden = hidden + attn.o_proj(out)
            gate, up = self.gate_up[i](layer.post_attention_layernorm(hidden)).split(layer.mlp.up_proj.out_features, dim=-1)
            hidden = hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        return inner.norm(hidden), present


class KVCacheLlamaRows(KVCacheLlama):
    """The step with one more input and output (the verifier's, verifier_svc/greedy_head.py):
    `rows_index` int64 [k] after total_length, and `rows` float32 [1, k, hidden] after the
    present buffers, the final norm's output at those positions. logits_index and rows_index
    may each be empty: a pass that takes rows only runs no output head."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_bias: torch.Tensor, logits_index: torch.Tensor,
        seqlens_k: torch.Tensor, total_length: torch.Tensor, rows_index: torch.Tensor, *cache: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        hidden, present = self.trunk(input_ids, position_ids, attention_bias, seqlens_k, total_length, cache)
        return (self.model.lm_head(hidden.index_select(1, logits_index)), *present, hidden.index_select(1, rows_index))


def rows_io_names(num_layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of KVCacheLlamaRows' graph."""
    inputs, outputs = io_names(num_layers, CACHE)
    return [*inputs[:6], "rows_index", *inputs[6:]], [*outputs, "rows"]


def _stacked(projections: list[nn.Linear]) -> nn.Linear:
    """One linear layer whose outputs are those of `projections`, in order."""
    biases = [p.bias for p in projections]
    stacked = nn.Linear(projections[0].in_features, sum(p.out_features for p in projections), bias=biases[0] is not None)
    with torch.no_grad():
        stacked.weight.copy_(torch.cat([p.weight for p in projections]))
        if stacked.bias is not None:
            stacked.bias.copy_(torch.cat(biases))  # type: ignore[arg-type]
    return stacked


def export_llama(model: nn.Module, path: Path, rows: bool = False) -> Path:
    """Write `path` (float32) for `model`, a LlamaForCausalLM in eval mode, with torch's
    TorchScript exporter (this graph is plain tensor code; it needs no tracing of the cache),
    traced on a step of 2 tokens after 3 cached ones (every axis dynamic). `rows`: the graph of
    KVCacheLlamaRows (rows_io_names) instead of the in_place contract's."""
    wrapper = (KVCacheLlamaRows if rows else KVCacheLlama)(model.float().eval())
    config = model.config
    inputs, outputs = rows_io_names(config.num_hidden_layers) if rows else io_names(config.num_hidden_layers, CACHE)
    past, n = 3, 2
    ids = torch.randint(0, config.vocab_size, (1, n))
    positions = torch.arange(past, past + n).unsqueeze(0)
    lengths = (torch.tensor([past + n - 1], dtype=torch.int32), torch.tensor(past + n, dtype=torch.int32))
    buffers = [torch.randn(1, wrapper.num_kv_heads, past + n, wrapper.head_dim) for _ in range(2 * config.num_hidden_layers)]
    buffer_names = [name for name in [*inputs, *outputs] if name.startswith(("cache_", "present_"))]
    axes = {
        "input_ids": {1: "n"},
        "position_ids": {1: "n"},
        "attention_bias": {2: "n", 3: "total"},
        "logits_index": {0: "m"},
        "logits": {1: "m"},
        **({"rows_index": {0: "k"}, "rows": {1: "k"}} if rows else {}),
        **{name: {2: "capacity"} for name in buffer_names},
    }
    extra = (torch.tensor([n - 1]),) if rows else ()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        torch.onnx.export(
            wrapper,
            (ids, positions, causal_bias(past, n), torch.tensor([n - 1]), *lengths, *extra, *buffers),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return path

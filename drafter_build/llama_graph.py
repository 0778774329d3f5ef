"""The hand-written ONNX graph of a LlamaForCausalLM step (the `in_place` I/O contract of
drafter_build/onnx_contract.py): the model's own modules (embedding, RMSNorms, projections,
MLPs, rotary embedding, head) with each layer's attention one fused node that reads the cache
where it lies and writes the step's entries into it (fused_attention.py), built with few nodes
because a one-token call is mostly small nodes around the products: projections that read the
same input stacked into one, rotate_half as a product, reshapes that name every size but the
token axis (no shape arithmetic in the graph). It serves only the exact Llama layout
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
# `specdec draft build` rebuilds a drafter built before. 3: each layer's attention is one fused
# node over the cache's buffers, written in place (the in_place contract); an int8 call of one
# token took 12.3-17.9 ms against 13.4-20.9 after 64-1,024 cached tokens
# (docs/design/drafter-export.md). 2: q, k and v one product, as are the MLP's gate and up.
GRAPH_VERSION = 3
CACHE = IN_PLACE


def is_llama_layout(model: nn.Module) -> bool:
    """Whether `model` is exactly transformers' LlamaForCausalLM, the module tree this graph reads
    (a subclass or a relative with the same names may compute something else)."""
    from transformers import LlamaForCausalLM

    return type(model) is LlamaForCausalLM


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

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_bias: torch.Tensor, logits_index: torch.Tensor,
        seqlens_k: torch.Tensor, total_length: torch.Tensor, *cache: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """The step of n tokens ([1, n] ids and positions; a batch of one). Every reshape names
        its sizes but the token axis (-1): the graph does no shape arithmetic."""
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)  # [1, n, hidden]
        cos, sin = (t.unsqueeze(2) for t in inner.rotary_emb(hidden, position_ids))  # [1, n, 1, d]
        heads, kv_heads, d = self.num_heads, self.num_kv_heads, self.head_dim
        # transformers' rotate_half(x) = cat(-x[d/2:], x[:d/2]) as a product with a constant
        # signed permutation (exact: one nonzero term per output), one node instead of four.
        rotate_half = torch.zeros(d, d)
        rotate_half[d // 2 :, : d // 2] = -torch.eye(d // 2)
        rotate_half[: d // 2, d // 2 :] = torch.eye(d // 2)
        present: list[torch.Tensor] = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            qk, v = self.qkv[i](x).view(1, -1, heads + 2 * kv_heads, d).split([heads + kv_heads, kv_heads], dim=2)
            qk = qk * cos + torch.matmul(qk, rotate_half) * sin  # the rotary embedding of q and k at once
            q, k = qk.split([heads, kv_heads], dim=2)  # [1, n, heads, d], [1, n, kv, d]
            out, keys, values = GroupQueryAttention.apply(
                q.reshape(1, -1, heads * d), k.reshape(1, -1, kv_heads * d), v.reshape(1, -1, kv_heads * d), cache[2 * i], cache[2 * i + 1],
                seqlens_k, total_length, attention_bias, heads, kv_heads, attn.scaling,
            )
            present += [keys, values]
            hidden = hidden + attn.o_proj(out)
            gate, up = self.gate_up[i](layer.post_attention_layernorm(hidden)).split(layer.mlp.up_proj.out_features, dim=-1)
            hidden = hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        hidden = inner.norm(hidden).index_select(1, logits_index)  # [1, m, hidden]
        return (self.model.lm_head(hidden), *present)


def _stacked(projections: list[nn.Linear]) -> nn.Linear:
    """One linear layer whose outputs are those of `projections`, in order."""
    biases = [p.bias for p in projections]
    stacked = nn.Linear(projections[0].in_features, sum(p.out_features for p in projections), bias=biases[0] is not None)
    with torch.no_grad():
        stacked.weight.copy_(torch.cat([p.weight for p in projections]))
        if stacked.bias is not None:
            stacked.bias.copy_(torch.cat(biases))  # type: ignore[arg-type]
    return stacked


def export_llama(model: nn.Module, path: Path) -> Path:
    """Write `path` (float32) for `model`, a LlamaForCausalLM in eval mode, with torch's
    TorchScript exporter (this graph is plain tensor code; it needs no tracing of the cache),
    traced on a step of 2 tokens after 3 cached ones (every axis dynamic)."""
    wrapper = KVCacheLlama(model.float().eval())
    config = model.config
    inputs, outputs = io_names(config.num_hidden_layers, CACHE)
    past, n = 3, 2
    ids = torch.randint(0, config.vocab_size, (1, n))
    positions = torch.arange(past, past + n).unsqueeze(0)
    lengths = (torch.tensor([past + n - 1], dtype=torch.int32), torch.tensor(past + n, dtype=torch.int32))
    buffers = [torch.randn(1, wrapper.num_kv_heads, past + n, wrapper.head_dim) for _ in range(2 * config.num_hidden_layers)]
    axes = {
        "input_ids": {1: "n"},
        "position_ids": {1: "n"},
        "attention_bias": {2: "n", 3: "total"},
        "logits_index": {0: "m"},
        "logits": {1: "m"},
        **{name: {2: "capacity"} for name in [*inputs[6:], *outputs[1:]]},
    }
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        torch.onnx.export(
            wrapper,
            (ids, positions, causal_bias(past, n), torch.tensor([n - 1]), *lengths, *buffers),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return path

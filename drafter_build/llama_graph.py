"""The hand-written ONNX graph of a LlamaForCausalLM step (the I/O contract of
drafter_build/onnx_export.py): the model's own modules (embedding, RMSNorms, projections, MLPs,
rotary embedding, head) with the attention written out as matmul + softmax over plain cache
tensors, built with few nodes because a one-token call is mostly small nodes around the
products: projections that read the same input stacked into one, grouped attention without
copies of the cache, rotate_half as a product, reshapes that name every size but the token axis
(no shape arithmetic in the graph). It serves only the exact Llama layout (`is_llama_layout`);
every other architecture goes through generic_export.py, and both pass the same check
(export_check.py). The layers' step (`KVCacheLlama.step`) takes its attention as a function:
the verifier's graph (verifier_svc/backends/onnx_step_graph.py) attends another way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from drafter_build.onnx_contract import OPSET, causal_bias, io_names

# The graph's version, recorded in the manifest: raised whenever this graph changes under the
# same I/O contract, so that `specdec draft build` rebuilds a drafter built before. 2: the
# attention reads the grouped KV heads in place, each layer's q, k and v projections are one
# product, as are its MLP's gate and up, and the rotary embedding is one product for q and k;
# an int8 call of one token took 8.4-12.4 ms against 10.9-18.8 after 150-1,500 cached tokens
# (bench/results/drafter_calls-20261125-graph2.md), with the same float32 logits.
GRAPH_VERSION = 2

# A layer's attention inside KVCacheLlama.step: (layer, q, k, v, scaling) -> (output, cache outputs).
LayerAttention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, list[torch.Tensor]]]


def is_llama_layout(model: nn.Module) -> bool:
    """Whether `model` is exactly transformers' LlamaForCausalLM, the module tree this graph reads
    (a subclass or a relative with the same names may compute something else)."""
    from transformers import LlamaForCausalLM

    return type(model) is LlamaForCausalLM


class KVCacheLlama(nn.Module):
    """A LlamaForCausalLM step over flat past-KV tensors: (ids, positions, bias, logits_index,
    *past) -> (logits, *present), past and present interleaved as key.0, value.0, key.1, ..."""

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
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_bias: torch.Tensor,
        logits_index: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        bias = self.tiled(attention_bias)

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
            return self.attend(q, k, v, past[2 * i], past[2 * i + 1], bias, scaling)

        return self.step(input_ids, position_ids, logits_index, attend)

    def tiled(self, bias: torch.Tensor) -> torch.Tensor:
        """The bias [1, 1, n, keys] for a KV head's query heads stacked as rows (`grouped`): each
        reads the same bias, tiled once for every layer: [1, 1, groups n, keys]."""
        return bias.repeat(1, 1, self.num_heads // self.num_kv_heads, 1)

    def grouped(self, q: torch.Tensor) -> torch.Tensor:
        """Queries [1, heads, n, d] as [1, kv, groups n, d]: query head h reads KV head
        h // groups (transformers' repeat_kv), so a KV head's query heads are stacked as rows of
        one product with its keys instead of copying each KV head `groups` times."""
        return q.reshape(1, self.num_kv_heads, -1, self.head_dim)

    def step(self, input_ids: torch.Tensor, position_ids: torch.Tensor, logits_index: torch.Tensor, attend: LayerAttention) -> tuple[torch.Tensor, ...]:
        """The step of a sequence of n tokens ([1, n] ids and positions; a batch of one) with each
        layer's attention `attend(layer, q [1, heads, n, d], k, v [1, kv, n, d], scaling)` ->
        (output [1, heads, n, d], the layer's cache outputs). Every reshape names its sizes but
        the token axis (-1): the graph does no shape arithmetic."""
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
            q, k = qk.transpose(1, 2).split([heads, kv_heads], dim=1)  # [1, heads, n, d], [1, kv, n, d]
            out, cached = attend(i, q, k, v.transpose(1, 2), attn.scaling)
            present += cached
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, -1, heads * d))
            gate, up = self.gate_up[i](layer.post_attention_layernorm(hidden)).split(layer.mlp.up_proj.out_features, dim=-1)
            hidden = hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        hidden = inner.norm(hidden).index_select(1, logits_index)  # [1, m, hidden]
        return (self.model.lm_head(hidden), *present)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor, bias: torch.Tensor, scaling: float
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One layer's attention: q [1, heads, n, d], the new entries k, v [1, kv, n, d], the
        layer's cache past_k, past_v [1, kv, past, d] and the bias `tiled` [1, 1, groups n,
        past + n] -> (the output [1, heads, n, d], what the layer returns as its cache: [past + n]
        entries)."""
        k = torch.cat([past_k, k], dim=2)  # [1, kv, past + n, d]
        v = torch.cat([past_v, v], dim=2)
        weights = torch.softmax(torch.matmul(self.grouped(q), k.transpose(2, 3)) * scaling + bias, dim=-1)
        return weights.matmul(v).view(1, self.num_heads, -1, self.head_dim), [k, v]


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
    TorchScript exporter (this graph is plain tensor code; it needs no tracing of the cache)."""
    wrapper = KVCacheLlama(model.float().eval())
    inputs, outputs = io_names(model.config.num_hidden_layers)
    cache_axes = {**{name: {2: "past"} for name in inputs[4:]}, **{name: {2: "total"} for name in outputs[1:]}}
    return export_step(wrapper, path, inputs, outputs, cache_axes, past_len=3)


def export_step(
    wrapper: KVCacheLlama, path: Path, inputs: list[str], outputs: list[str], cache_axes: dict[str, dict[int, str]], past_len: int,
    lengths: bool = False,
) -> Path:
    """Export `wrapper` (a KVCacheLlama, or a graph with its inputs) to `path` with the contract's
    axes for ids, positions, bias and logits and `cache_axes` for the cache's inputs and outputs;
    traced on a step of 2 tokens after `past_len` cached ones (every axis dynamic). With
    `lengths`, the graph also takes the int32 inputs seqlens_k [1] and total_length [] after
    logits_index, and its cache inputs are buffers with room for the step's entries."""
    config = wrapper.model.config
    n = 2
    ids = torch.randint(0, config.vocab_size, (1, n))
    positions = torch.arange(past_len, past_len + n).unsqueeze(0)
    entries = past_len + n if lengths else past_len
    kv = [torch.randn(1, wrapper.num_kv_heads, entries, wrapper.head_dim) for _ in range(2 * config.num_hidden_layers)]
    extra = (torch.tensor([past_len + n - 1], dtype=torch.int32), torch.tensor(past_len + n, dtype=torch.int32)) if lengths else ()
    axes = {
        "input_ids": {1: "n"},
        "position_ids": {1: "n"},
        "attention_bias": {2: "n", 3: "total"},
        "logits_index": {0: "m"},
        "logits": {1: "m"},
        **cache_axes,
    }
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        torch.onnx.export(
            wrapper,
            (ids, positions, causal_bias(past_len, n), torch.tensor([n - 1]), *extra, *kv),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return path

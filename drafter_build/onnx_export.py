"""Export a transformers LlamaForCausalLM to ONNX with its KV cache as inputs and outputs, and
optionally quantize its weights to int8 (onnxruntime's MatMulNBits).

Offline only (torch + transformers); the drafter runs the result under onnxruntime, torch-free.

The I/O contract of every exported model (L layers, H KV heads of width D, vocabulary V; all
axes named here are dynamic):

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

The graph is the model's own modules (embedding, RMSNorms, projections, MLPs, rotary embedding,
head) with the attention written out as matmul + softmax, so the cache is plain tensors and the
mask is data (a tree needs no special kernel). Rolling a cache back is slicing its `past` axis.
A one-token call is mostly small nodes around the products (onnxruntime ran 1,900 a call
before GRAPH_VERSION 2, 1,000 now), so the graph is written with few: projections that read the
same input stacked into one, grouped attention without copies of the cache, rotate_half as a
product.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

MODEL_FILE = "model.onnx"
OPSET = 17
# The exported graph's version, recorded in the manifest: raised whenever the graph changes under
# the same I/O contract, so that `specdec draft build` rebuilds a drafter built before. 2: the
# attention reads the grouped KV heads in place, each layer's q, k and v projections are one
# product, as are its MLP's gate and up, and the rotary embedding is one product for q and k;
# an int8 call of one token took 8.4-12.4 ms against 10.9-18.8 after 150-1,500 cached tokens
# (bench/results/drafter_calls-20261125-graph2.md), with the same float32 logits.
GRAPH_VERSION = 2


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
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)  # [b, n, hidden]
        cos, sin = (t.unsqueeze(2) for t in inner.rotary_emb(hidden, position_ids))  # [b, n, 1, d]
        batch, n = input_ids.shape
        heads, kv_heads, d = self.num_heads, self.num_kv_heads, self.head_dim
        groups = heads // kv_heads
        # transformers' rotate_half(x) = cat(-x[d/2:], x[:d/2]) as a product with a constant
        # signed permutation (exact: one nonzero term per output), one node instead of four.
        rotate_half = torch.zeros(d, d)
        rotate_half[d // 2 :, : d // 2] = -torch.eye(d // 2)
        rotate_half[: d // 2, d // 2 :] = torch.eye(d // 2)
        present: list[torch.Tensor] = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            qk, v = self.qkv[i](x).view(batch, n, heads + 2 * kv_heads, d).split([heads + kv_heads, kv_heads], dim=2)
            qk = qk * cos + torch.matmul(qk, rotate_half) * sin  # the rotary embedding of q and k at once
            q, k = qk.transpose(1, 2).split([heads, kv_heads], dim=1)  # [b, heads, n, d], [b, kv, n, d]
            v = v.transpose(1, 2)
            k = torch.cat([past[2 * i], k], dim=2)  # [b, kv, past + n, d]
            v = torch.cat([past[2 * i + 1], v], dim=2)
            present += [k, v]
            # Grouped attention in place: query head h reads KV head h // groups (transformers'
            # repeat_kv), so the queries of a KV head's group are stacked as rows of one product
            # with its keys instead of copying each KV head `groups` times.
            q = q.reshape(batch, kv_heads, groups * n, d)
            scores = torch.matmul(q, k.transpose(2, 3)) * attn.scaling  # [b, kv, groups n, past + n]
            scores = scores.view(batch, kv_heads, groups, n, -1) + attention_bias.unsqueeze(2)
            weights = torch.softmax(scores, dim=-1).view(batch, kv_heads, groups * n, -1)
            out = torch.matmul(weights, v).view(batch, heads, n, d).transpose(1, 2).reshape(batch, n, heads * d)
            hidden = hidden + attn.o_proj(out)
            gate, up = self.gate_up[i](layer.post_attention_layernorm(hidden)).split(layer.mlp.up_proj.out_features, dim=-1)
            hidden = hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
        hidden = inner.norm(hidden).index_select(1, logits_index)  # [b, m, hidden]
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


def export(model: nn.Module, out_dir: Path) -> Path:
    """Write out_dir/model.onnx (float32, weights in the same file or beside it) for `model`, a
    LlamaForCausalLM in eval mode; returns the file."""
    wrapper = KVCacheLlama(model.float().eval())
    config = model.config
    layers = config.num_hidden_layers
    inputs, outputs = io_names(layers)
    # Example shapes: past 3, n 2 (both dynamic in the graph).
    past_len, n = 3, 2
    ids = torch.randint(0, config.vocab_size, (1, n))
    positions = torch.arange(past_len, past_len + n).unsqueeze(0)
    kv = [torch.randn(1, wrapper.num_kv_heads, past_len, wrapper.head_dim) for _ in range(2 * layers)]
    axes = {
        "input_ids": {0: "batch", 1: "n"},
        "position_ids": {0: "batch", 1: "n"},
        "attention_bias": {0: "batch", 2: "n", 3: "total"},
        "logits_index": {0: "m"},
        "logits": {0: "batch", 1: "m"},
        **{name: {0: "batch", 2: "past"} for name in inputs[4:]},
        **{name: {0: "batch", 2: "total"} for name in outputs[1:]},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILE
    with torch.no_grad():
        torch.onnx.export(
            wrapper,
            (ids, positions, causal_bias(past_len, n), torch.tensor([n - 1]), *kv),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return path


def quantize_int8(source: Path, target: Path, block_size: int = 32) -> Path:
    """int8 weights for every MatMul with a constant weight (the projections, MLPs and head):
    onnxruntime's MatMulNBits (8 bits, symmetric, one scale per block of `block_size` input
    channels) with int8 products (accuracy level 4: activations quantized on the fly per row
    and block), the fast CPU path: 10-15 ms a token for SmolLM2 where float32 products (level 1)
    took 146 ms. Per-row activation scales keep a token's result nearly independent of the
    other tokens in the call (2.9e-2 logits on a tiny model between one call and token by token;
    level 1: 1.7e-6). Not quantize_dynamic: its per-tensor activation scales let one token's
    outliers (the first token's massive activations) crush every other token's precision, and a
    prompt run in one call gave logits 9 units away from the same prompt run token by token."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), bits=8, block_size=block_size, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    target.parent.mkdir(parents=True, exist_ok=True)
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    return target


def model_shape(model: nn.Module) -> dict[str, int]:
    """What the drafter needs to size its cache, from the model's config."""
    config = model.config
    return {
        "num_layers": config.num_hidden_layers,
        "num_kv_heads": config.num_key_value_heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "vocab_size": config.vocab_size,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }


def write_manifest(out_dir: Path, manifest: dict[str, object]) -> Path:
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def max_abs_logit_diff(model: nn.Module, onnx_path: Path, token_ids: list[int], split: int) -> float:
    """Largest |logit| difference between `model` (torch, full sequence) and the ONNX model run in
    two calls (token_ids[:split] from an empty cache, then the rest on the returned cache)."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    shape = model_shape(model)
    kv = [np.zeros((1, shape["num_kv_heads"], 0, shape["head_dim"]), np.float32) for _ in range(2 * shape["num_layers"])]
    inputs, _ = io_names(shape["num_layers"])
    rows = []
    for start, stop in ((0, split), (split, len(token_ids))):
        n = stop - start
        feed = {
            "input_ids": np.array([token_ids[start:stop]], np.int64),
            "position_ids": np.arange(start, stop, dtype=np.int64)[None],
            "attention_bias": causal_bias(start, n).numpy(),
            "logits_index": np.arange(n, dtype=np.int64),
            **dict(zip(inputs[4:], kv)),
        }
        logits, *kv = session.run(None, feed)
        rows.append(logits[0])
    with torch.no_grad():
        expected = model(torch.tensor([token_ids])).logits[0].float().numpy()
    return float(np.abs(np.concatenate(rows) - expected).max()) if math.isfinite(expected.sum()) else math.inf

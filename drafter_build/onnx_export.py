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
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

MODEL_FILE = "model.onnx"
OPSET = 17


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

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_bias: torch.Tensor,
        logits_index: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        inner = self.model.model
        hidden = inner.embed_tokens(input_ids)  # [b, n, hidden]
        cos, sin = inner.rotary_emb(hidden, position_ids)
        batch, n = input_ids.shape
        groups = self.num_heads // self.num_kv_heads
        present: list[torch.Tensor] = []
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(batch, n, self.num_heads, self.head_dim).transpose(1, 2)  # [b, heads, n, d]
            k = attn.k_proj(x).view(batch, n, self.num_kv_heads, self.head_dim).transpose(1, 2)  # [b, kv, n, d]
            v = attn.v_proj(x).view(batch, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            k = torch.cat([past[2 * i], k], dim=2)  # [b, kv, past + n, d]
            v = torch.cat([past[2 * i + 1], v], dim=2)
            present += [k, v]
            k = k.repeat_interleave(groups, dim=1)  # [b, heads, past + n, d], as transformers' repeat_kv
            v = v.repeat_interleave(groups, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) * attn.scaling + attention_bias  # [b, heads, n, past + n]
            weights = torch.softmax(scores, dim=-1)
            out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, n, self.num_heads * self.head_dim)
            hidden = hidden + attn.o_proj(out)
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = inner.norm(hidden).index_select(1, logits_index)  # [b, m, hidden]
        return (self.model.lm_head(hidden), *present)


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

"""Any transformers decoder-only causal LM as an ONNX drafter graph (the I/O contract of
drafter_build/onnx_contract.py), through torch's dynamo exporter (`torch.onnx.export(...,
dynamo=True)`).

`KVCacheModel` wraps the model and calls its own forward with the contract's inputs: the past
tensors become a transformers `DynamicCache`, the additive mask goes in as a prepared 4D mask
(transformers uses such a mask as given), `logits_index` as `logits_to_keep`. Whatever the
model's forward computes (q/k norms, logit scaling, soft caps, fused projections, learned
positions, MoE routing) is in the graph by construction. The attention runs as transformers'
`eager` implementation, which every architecture has; mixture-of-experts layers run every
expert with the router's weights (build.load_for_export loads them so).

Sliding windows: transformers applies a layer's window when it builds its own masks, which a
prepared mask bypasses, so the wrapper adds the window to the bias itself (a key more than
`window - 1` positions before its query is masked, transformers' `sliding_window_overlay`), from
the query positions and the cache positions 0..past-1. Models that mix layer types (Gemma 2/3,
Qwen2 with `max_window_layers`) get a mask per type (`{"full_attention": ..., "sliding_attention":
...}`, the mapping their forward accepts); a model whose layers all have the window (Mistral,
Phi-3, Starcoder2) gets the windowed mask.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import torch
from torch import nn

from drafter_build.onnx_contract import DYNAMO_OPSET, causal_bias, io_names

# The generic graph's version, recorded in the manifest beside its name (see llama_graph.GRAPH_VERSION).
GRAPH_VERSION = 1
FULL, SLIDING = "full_attention", "sliding_attention"
# Above this many bytes of float32 weights the graph keeps them in a file beside model.onnx
# (protobuf's 2 GiB limit on one file).
_EXTERNAL_DATA_BYTES = 1 << 30


class UnsupportedModel(ValueError):
    """A model this exporter cannot express in the contract (named in the message)."""


def layer_windows(config) -> list[int | None]:  # type: ignore[no-untyped-def]
    """Each decoder layer's sliding window (None: full attention), from the config as
    transformers' masks read it: `layer_types` where the config has them, else one
    `sliding_window` for every layer."""
    text = config.get_text_config(decoder=True)
    window = getattr(text, "sliding_window", None)
    types = getattr(text, "layer_types", None)
    if types is None:
        return [window] * text.num_hidden_layers
    other = sorted(set(types) - {FULL, SLIDING})
    if other:
        raise UnsupportedModel(f"{type(config).__name__} has layer types {', '.join(other)}: only full and sliding-window attention export")
    if SLIDING in types and not window:
        raise UnsupportedModel(f"{type(config).__name__} has sliding-window layers but no sliding_window size")
    return [window if kind == SLIDING else None for kind in types]


def window_bias(bias: torch.Tensor, position_ids: torch.Tensor, past: int | torch.SymInt, window: int) -> torch.Tensor:
    """`bias` [b, 1, n, past + n] with every key `window` or more positions before its query
    masked; cached key j is at position j, new key i at position_ids[:, i]."""
    cached = torch.arange(past, device=position_ids.device).unsqueeze(0).expand(position_ids.shape[0], -1)
    keys = torch.cat([cached, position_ids], dim=1)  # [b, past + n]
    too_far = (position_ids.unsqueeze(2) - keys.unsqueeze(1)) >= window  # [b, n, past + n]
    return bias.masked_fill(too_far.unsqueeze(1), torch.finfo(bias.dtype).min)


class KVCacheModel(nn.Module):
    """A transformers causal LM step over flat past-KV tensors: (ids, positions, bias,
    logits_index, *past) -> (logits, *present), past and present interleaved as key.0, value.0,
    key.1, ... The model must run with the eager attention implementation."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        windows = layer_windows(model.config)
        self.window = next((w for w in windows if w), None)
        self.typed = getattr(model.config.get_text_config(decoder=True), "layer_types", None) is not None
        # transformers 5 names the cache argument `cache` (`past_key_values` before) and most
        # models take `logits_to_keep`; a model without it gets its logits picked here.
        parameters = inspect.signature(model.forward).parameters
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.keeps_logits = "logits_to_keep" in parameters

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_bias: torch.Tensor,
        logits_index: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache

        cache = DynamicCache(ddp_cache_data=list(zip(past[0::2], past[1::2])))  # no config: every layer keeps all its entries
        mask: torch.Tensor | dict[str, torch.Tensor] = attention_bias
        if self.window is not None:
            windowed = window_bias(attention_bias, position_ids, past[0].shape[2], self.window)
            mask = {FULL: attention_bias, SLIDING: windowed} if self.typed else windowed
        keep = {"logits_to_keep": logits_index} if self.keeps_logits else {}
        out = self.model(
            input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=True,
            **{self.cache_argument: cache}, **keep,
        )
        logits = out.logits if self.keeps_logits else out.logits.index_select(1, logits_index)
        present = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        return (logits, *present)


def cache_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, KV heads, head width) of the cache the model's forward fills, from one token;
    UnsupportedModel where it fills none or its layers differ (the contract has one shape)."""
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=True)
    cache = out.get("cache", out.get("past_key_values"))  # its name in transformers 5, and before
    layers = getattr(cache, "layers", None)
    if not layers or any(getattr(layer, "keys", None) is None for layer in layers):
        raise UnsupportedModel(f"{type(model).__name__} keeps no per-layer key/value cache ({type(cache).__name__})")
    shapes = {(t.shape[1], t.shape[3]) for layer in layers for t in (layer.keys, layer.values)}  # (heads, width)
    if len(shapes) != 1:
        raise UnsupportedModel(f"{type(model).__name__}'s layers cache keys and values of different shapes {sorted(shapes)}")
    heads, width = shapes.pop()
    return len(layers), heads, width


def export_generic(model: nn.Module, path: Path) -> Path:
    """Write `path` (float32) for `model`, a transformers causal LM in eval mode loaded with
    attn_implementation="eager"; UnsupportedModel where it cannot take the contract's inputs."""
    wrapper = KVCacheModel(model.float().eval()).eval()
    layers, heads, width = cache_shape(model)
    inputs, outputs = io_names(layers)
    past_len, n = 3, 2  # example shapes, none of them 0 or 1 (torch.export would fix those)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    example = (
        torch.randint(0, vocab, (1, n)), torch.arange(past_len, past_len + n).unsqueeze(0), causal_bias(past_len, n),
        torch.arange(n), *(torch.randn(1, heads, past_len, width) for _ in range(2 * layers)),
    )
    dynamic = torch.export.Dim.DYNAMIC
    shapes = {
        "input_ids": {1: dynamic}, "position_ids": {1: dynamic}, "attention_bias": {2: dynamic, 3: dynamic},
        "logits_index": {0: dynamic}, "past": tuple({2: dynamic} for _ in inputs[4:]),
    }
    weight_bytes = sum(p.numel() for p in model.parameters()) * 4
    # The exporter warns, once per process, of every torchvision operator it cannot register.
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with torch.no_grad():
            torch.onnx.export(
                wrapper, example, str(path), input_names=inputs, output_names=outputs, dynamic_shapes=shapes,
                opset_version=DYNAMO_OPSET, dynamo=True, external_data=weight_bytes > _EXTERNAL_DATA_BYTES, verbose=False,
            )
    finally:
        registration.setLevel(level)
    return path

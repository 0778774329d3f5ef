"""The attention masks a target pass hands to the model's own forward: the tree's mask, narrowed
per kind of layer by that layer's sliding window.

A pass gives transformers a ready 4D mask, which its mask builders return as they are, so the
windows that transformers would otherwise add are ours to apply. The rule is transformers' own
(`masking_utils.sliding_window_overlay`): a query at position p sees a key at position k only if
k > p - window. Positions are the pass's position ids (a tree node sits at its root's position
plus its depth), so a node's window is measured along its own path, exactly as if that path were
the whole sequence. Which layers have a window follows `masking_utils.create_masks_for_generate`:
`config.layer_types` when the config has it (Gemma 2/3, Qwen2/3 mix `full_attention` and
`sliding_attention` layers), else `config.sliding_window` for every layer (Mistral, Phi-3).
When layers differ, the model takes a dict of masks keyed by layer type, which the forwards of
such models accept in place of their own.

Pure functions over configs and tensors: no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


class UnsupportedAttention(ValueError):
    """The model has layers whose attention pattern a tree pass cannot reproduce exactly."""


@dataclass(frozen=True)
class LayerWindows:
    """Each layer type's window (None: the whole past) and whether the model takes one mask per type."""

    windows: dict[str, int | None]
    per_layer_type: bool

    @property
    def windowed(self) -> bool:
        return any(window is not None for window in self.windows.values())


def layer_windows(config: PretrainedConfig) -> LayerWindows:
    """The windows of the model's layers, read from its (text) config as transformers reads them."""
    text = config.get_text_config()
    window = getattr(text, "sliding_window", None)
    if getattr(text, "layer_types", None) is None:
        return LayerWindows({FULL_ATTENTION if window is None else SLIDING_ATTENTION: window}, per_layer_type=False)
    types = set(text.layer_types)
    unknown = types - {FULL_ATTENTION, SLIDING_ATTENTION}
    if unknown:
        raise UnsupportedAttention(f"{type(config).__name__}: layer types {sorted(unknown)} are not supported (only full and sliding-window attention)")
    if SLIDING_ATTENTION in types and window is None:
        raise UnsupportedAttention(f"{type(config).__name__}: sliding_attention layers without a sliding_window")
    windows = {kind: (window if kind == SLIDING_ATTENTION else None) for kind in types}
    return LayerWindows(windows, per_layer_type=len(types) > 1)


def within_window(query_positions: torch.Tensor, key_positions: torch.Tensor, window: int) -> torch.Tensor:
    """[..., T, K] bool: key k is inside query q's window (key_position > query_position - window).
    query_positions [..., T], key_positions [..., K]."""
    return key_positions.unsqueeze(-2) > query_positions.unsqueeze(-1) - window


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bool mask as an additive float mask (0 seen, dtype's min hidden): what both the eager
    and the SDPA attention accept."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~mask, torch.finfo(dtype).min)


def model_masks(
    layers: LayerWindows,
    mask: torch.Tensor,  # [B, T, K] bool: the tree's mask (and padding) of the pass
    query_positions: torch.Tensor,  # [B, T] int64
    key_positions: torch.Tensor,  # [B, K] int64
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The `attention_mask` argument of the model's forward: [B, 1, T, K] additive masks, one per
    layer type when the model takes them so, each the tree's mask within that type's window."""
    masks = {}
    for kind, window in layers.windows.items():
        seen = mask if window is None else mask & within_window(query_positions, key_positions, window)
        masks[kind] = additive(seen, dtype)[:, None].to(device)
    return masks if layers.per_layer_type else next(iter(masks.values()))

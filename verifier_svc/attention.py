"""The target's attention: transformers' SDPA, with grouped-query heads read in place on CPU.

SmolLM2-135M has 9 query heads sharing 3 key/value heads. For a pass of more than one new token
with an attention mask (every tree pass, every batched pass with drafts), transformers' `sdpa`
copies each layer's whole key and value cache to 9 heads first (`repeat_kv`), because CUDA's
fast kernels take no mask with grouped heads. On CPU torch's kernel takes both
(`enable_gqa=True`), so that copy is pure cost: a batched pass of 8 sessions with 400-1,000-token
caches and two drafted nodes takes 500 ms with `sdpa` and 162 ms with the heads read in place
(bench/pass_times.py, both in one run). A one-token pass without drafts was never affected
(transformers packs its query heads instead).

`GROUPED_SDPA` is registered with transformers' AttentionInterface (and sdpa's mask builder);
load_model selects it on CPU. Elsewhere (no mask, a single query token, or another device) it is
transformers' own `sdpa_attention_forward`.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_SDPA = "specdec_grouped_sdpa"


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, heads, T, d]
    key: torch.Tensor,  # [B, kv_heads, L, d]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ([B, T, heads, d] output, no weights)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or query.shape[2] == 1 or groups == 1 or query.device.type != "cpu" or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)  # type: ignore[arg-type]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)

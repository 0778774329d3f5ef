"""The target's attention: transformers' SDPA, with grouped-query heads read in place on CPU.

SmolLM2-135M has 9 query heads sharing 3 key/value heads. For a pass of more than one new token
with an attention mask (every tree pass, every batched pass with drafts), transformers' `sdpa`
copies each layer's whole key and value cache to 9 heads first (`repeat_kv`), because CUDA's
fast kernels take no mask with grouped heads. On CPU torch's kernel takes both
(`enable_gqa=True`), so that copy is pure cost: a batched pass of 8 sessions with 400-1,000-token
caches and two drafted nodes takes 500 ms with `sdpa` and 162 ms with the heads read in place
(bench/pass_times.py, both in one run). A one-token pass without drafts was never affected
(transformers packs its query heads instead).

A one-token query with a mask (a plain decoding step; in a batched pass, each session's
one-token round, one call per session and layer) stacks the query heads of each key/value head
as that head's rows and calls torch's kernel itself: transformers' wrapper does the same
(`pack_gqa`), bit for bit, after checks that cost more than the kernel's own ~30 us here (a
16-session batched pass 106.8 -> 95.0 ms, 2026-11-29; docs/design/grouped-attention.md).

`GROUPED_SDPA` is registered with transformers' AttentionInterface (and sdpa's mask builder);
the CPU backend (backends/cpu.py) selects it for models whose class runs SDPA. Elsewhere (no
mask, ungrouped heads, a position bias, or another device) it is transformers' own
`sdpa_attention_forward`. A layer with an attention soft cap (Gemma 2/3's
`attn_logit_softcapping`), which SDPA cannot apply, is computed as transformers' eager attention
does: scores, soft cap, mask, softmax in float32. A model class that does not run SDPA at all
(Gemma 2, BLOOM) gets `eager`.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AutoModelForCausalLM, PretrainedConfig
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
    softcap = kwargs.get("softcap")
    if softcap is not None:
        return softcapped_attention(query, key, value, attention_mask, groups, scaling, float(softcap))  # type: ignore[arg-type]
    if attention_mask is None or groups == 1 or query.device.type != "cpu" or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)  # type: ignore[arg-type]
    if query.shape[2] == 1 and attention_mask.shape[1] == 1:
        batch, heads, _, head_dim = query.shape
        rows = query.reshape(batch, heads // groups, groups, head_dim)  # head h reads key/value head h // groups
        out = torch.nn.functional.scaled_dot_product_attention(rows, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling)
        return out.reshape(batch, 1, heads, head_dim), None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def softcapped_attention(
    query: torch.Tensor,  # [B, heads, T, d]
    key: torch.Tensor,  # [B, kv_heads, L, d]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # additive, [B, 1, T, L]
    groups: int,
    scaling: float | None,
    softcap: float,
) -> tuple[torch.Tensor, None]:
    """Attention with the scores soft-capped before the mask (softcap * tanh(scores / softcap)),
    as transformers' eager attention computes it; [B, T, heads, d] output."""
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = torch.tanh(torch.matmul(query, key.transpose(2, 3)) * scale / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


def sdpa_or_eager(config: PretrainedConfig) -> str:
    """`sdpa` when the model's class runs SDPA, else `eager` (which every class has). The device
    backends (backends/) choose from it: GROUPED_SDPA in place of `sdpa` on CPU."""
    model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)
    return "sdpa" if model_class is not None and getattr(model_class, "_supports_sdpa", False) else "eager"


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)

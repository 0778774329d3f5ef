"""onnxruntime's fused attention node (GroupQueryAttention, com.microsoft) as torch's TorchScript
exporter writes it into a graph: the attention of the in-place cache contract
(drafter_build/onnx_contract.py), used by the Llama step (llama_graph.py) that the model
drafters and the verifier's onnxruntime passes run.

With its past and present inputs bound to one buffer, the node reads a sequence's L cached
entries where they lie (not the buffer's capacity), applies its causal mask and an additive bias
(a token tree hides a node's non-ancestors beyond causal order), and writes only the n new
entries at [L, L + n): nothing is copied. One node a layer instead of a dozen small ones
(docs/design/onnx-passes.md); it applies the rotary embedding too, from tables of every position,
and reads q, k and v packed, so a layer's step is its products, its norms and this node.
onnxruntime >= 1.22 takes the bias (and the positions a tree needs) on CPU.
"""

from __future__ import annotations

import torch

CONTRIB_DOMAIN = "com.microsoft"


class GroupQueryAttention(torch.autograd.Function):
    """The node in an exported graph: a layer's q, k and v packed as rows [1, n, (heads + 2 kv) d]
    (its stacked projection's output, before the rotary embedding), the layer's cache buffers
    [1, kv, C, d], seqlens_k int32 [1] (L + n - 1), total_length int32 [] (L + n), the rotary
    embedding's cos and sin tables [max positions, d / 2], the tokens' positions int64 [1, n]
    (a token tree's nodes share their depth's) and the bias [1, 1, n, L + n] -> (output [1, n,
    heads d], the buffers with the new entries). The node rotates q and k (Llama's rotate_half
    layout: not interleaved) at those positions before attending. Its forward only gives the
    outputs' shapes for tracing: the graph is run by onnxruntime, never by torch."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, qkv: torch.Tensor, cached_k: torch.Tensor, cached_v: torch.Tensor, seqlens_k: torch.Tensor, total_length: torch.Tensor,
        cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor, heads: int, kv_heads: int, scaling: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return qkv[..., : heads * cached_k.shape[-1]].clone(), cached_k.clone(), cached_v.clone()

    @staticmethod
    def symbolic(g, qkv, cached_k, cached_v, seqlens_k, total_length, cos, sin, positions, bias, heads: int, kv_heads: int, scaling: float):  # type: ignore[no-untyped-def]
        from torch.onnx._internal.torchscript_exporter.symbolic_helper import _optional_input_placeholder_tensor

        packed = _optional_input_placeholder_tensor(g)  # key and value: packed with the query
        out, keys, values = g.op(
            f"{CONTRIB_DOMAIN}::GroupQueryAttention", qkv, packed, packed, cached_k, cached_v, seqlens_k, total_length, cos, sin, positions,
            bias, num_heads_i=heads, kv_num_heads_i=kv_heads, scale_f=scaling, do_rotary_i=1, rotary_interleaved_i=0, outputs=3,
        )
        # The exporter's shape inference knows no contrib op: each output's type is declared,
        # the output's last dimension that of the heads alone (q's part of the packed rows).
        rows = qkv.type().varyingSizes()
        out.setType(qkv.type().with_sizes([*rows[:-1], heads * cached_k.type().varyingSizes()[-1]]))
        keys.setType(cached_k.type())
        values.setType(cached_v.type())
        return out, keys, values

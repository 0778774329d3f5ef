"""The masks a pass hands to the model: for a plain sequence, transformers' own sliding-window
causal mask; for a tree, each node's window measured along its own path; which layers get which
mask, read from the config as transformers reads it."""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config
from transformers.masking_utils import sliding_window_causal_mask_function

from verifier_svc.layer_masks import FULL_ATTENTION, SLIDING_ATTENTION, UnsupportedAttention, layer_windows, model_masks
from verifier_svc.token_tree import ROOT, build_tree, chain, tree_attention_mask, tree_position_ids

WINDOW = 4


def seen(masks: torch.Tensor) -> torch.Tensor:
    return masks[0, 0] == 0  # additive: 0 where seen


def test_a_chain_gets_transformers_sliding_window_causal_mask() -> None:
    tree, cached, pending = chain([5, 6, 7]), 6, 2
    mask = tree_attention_mask(tree, cached, pending)
    queries = tree_position_ids(tree, cached, pending)
    keys = torch.cat([torch.arange(cached), queries])
    windows = layer_windows(MistralConfig(sliding_window=WINDOW))
    got = seen(model_masks(windows, mask[None], queries[None], keys[None], torch.float32, torch.device("cpu")))  # type: ignore[arg-type]
    rule = sliding_window_causal_mask_function(WINDOW)
    expected = torch.tensor([[bool(rule(0, 0, q, k)) for k in keys] for q in queries])
    assert torch.equal(got, expected)


def test_a_node_sees_the_window_along_its_own_path() -> None:
    """Node 2 (depth 2, under node 1) sees its path's last WINDOW positions: the root, node 1
    and itself, and one cached entry; never its uncle, node 0."""
    tree = build_tree([5, 6, 7], [ROOT, ROOT, 1])
    cached, pending = 6, 1
    mask = tree_attention_mask(tree, cached, pending)
    queries = tree_position_ids(tree, cached, pending)
    keys = torch.cat([torch.arange(cached), queries])
    windows = layer_windows(MistralConfig(sliding_window=WINDOW))
    got = seen(model_masks(windows, mask[None], queries[None], keys[None], torch.float32, torch.device("cpu")))  # type: ignore[arg-type]
    assert got[3].nonzero().flatten().tolist() == [5, 6, 8, 9]  # cached 5, root, node 1, node 2


def test_layer_types_give_one_mask_each_when_they_differ() -> None:
    gemma = layer_windows(Gemma2Config(sliding_window=WINDOW, num_hidden_layers=2))
    assert gemma.per_layer_type and gemma.windows == {SLIDING_ATTENTION: WINDOW, FULL_ATTENTION: None}
    qwen = layer_windows(Qwen2Config(num_hidden_layers=2))  # windows off: every layer full
    assert not qwen.per_layer_type and qwen.windows == {FULL_ATTENTION: None}
    assert layer_windows(LlamaConfig()).windows == {FULL_ATTENTION: None}
    mask = torch.ones(1, 2, 8, dtype=torch.bool)
    masks = model_masks(gemma, mask, torch.tensor([[6, 7]]), torch.arange(8)[None], torch.float32, torch.device("cpu"))
    assert isinstance(masks, dict) and seen(masks[FULL_ATTENTION]).all()
    assert seen(masks[SLIDING_ATTENTION])[1].nonzero().flatten().tolist() == [4, 5, 6, 7]


def test_a_layer_type_without_an_exact_mask_is_refused_by_name() -> None:
    config = LlamaConfig(num_hidden_layers=2)
    config.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(UnsupportedAttention, match="chunked_attention"):
        layer_windows(config)

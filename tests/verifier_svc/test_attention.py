"""The CPU target's attention (grouped key/value heads read in place) against transformers' own
sdpa: the same logits for tree passes and batched passes with drafts, which are the passes it
changes."""

from __future__ import annotations

import pytest
import torch

from tests.verifier_svc.test_batched_pass import LOGIT_ATOL, run
from verifier_svc.attention import GROUPED_SDPA
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.target_model import TargetModel


@pytest.fixture(scope="module")
def grouped() -> TargetModel:
    model = load_model(model_dir("default"), "cpu", torch.float32)
    assert model.config._attn_implementation == GROUPED_SDPA
    return TargetModel(model, "grouped")


def test_grouped_attention_gives_the_logits_of_transformers_sdpa(grouped: TargetModel, reference_model, tokenizer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Sessions with trees, alone and batched, joining at different rounds (test_batched_pass's
    run): the same tokens, and every round's logits within LOGIT_ATOL of the reference model's;
    and the grouped kernel did run (torch's sdpa called with enable_gqa and a mask)."""
    reference = TargetModel(reference_model, "reference")
    assert reference_model.config._attn_implementation == "sdpa"
    sdpa, grouped_calls = torch.nn.functional.scaled_dot_product_attention, []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("enable_gqa") and kwargs.get("attn_mask") is not None:
            grouped_calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    for batched in (False, True):
        ref_tokens, ref_logits = run(reference, tokenizer, batched)
        assert not grouped_calls
        tokens, logits = run(grouped, tokenizer, batched)
        assert grouped_calls, "the grouped kernel never ran"
        grouped_calls.clear()
        assert tokens == ref_tokens
        worst = max((a - b).abs().max().item() for xs, ys in zip(ref_logits, logits) for a, b in zip(xs, ys))
        print(f"batched={batched}: grouped vs transformers' sdpa, max |logit difference| {worst:.2e}")
        assert worst < LOGIT_ATOL


def test_softcapped_attention_is_transformers_eager_attention() -> None:
    """Grouped heads, an additive mask and a soft cap small enough to bite: the same output as
    transformers' eager attention (Gemma 2's), which applies the cap before the mask."""
    from types import SimpleNamespace

    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from verifier_svc.attention import grouped_sdpa_attention

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 6, 5, 16, generator=generator) * 3
    key, value = torch.randn(2, 2, 9, 16, generator=generator) * 3, torch.randn(2, 2, 9, 16, generator=generator)
    mask = torch.zeros(2, 1, 5, 9).masked_fill_(torch.rand(2, 1, 5, 9, generator=generator) < 0.3, torch.finfo(torch.float32).min)
    mask[..., -1] = 0  # every query sees a key
    module = SimpleNamespace(num_key_value_groups=3, training=False, head_dim=16)
    expected, _ = eager_attention_forward(module, query, key, value, mask, scaling=0.25, softcap=2.0)  # type: ignore[arg-type]
    got, _ = grouped_sdpa_attention(module, query, key, value, mask, scaling=0.25, softcap=2.0)  # type: ignore[arg-type]
    uncapped, _ = eager_attention_forward(module, query, key, value, mask, scaling=0.25)  # type: ignore[arg-type]
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, uncapped, atol=1e-2)  # the cap matters here


@pytest.mark.parametrize("hidden", [0, 7])
def test_a_one_token_query_is_transformers_sdpa_bit_for_bit(hidden: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The one-token path (heads stacked per key/value head, torch's kernel called directly) gives
    exactly what transformers' sdpa gives, without going through it, with `hidden` columns masked."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from verifier_svc import attention

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.training = 3, True, False  # type: ignore[assignment]
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 9, 1, 64, generator=generator)
    key, value = torch.randn(2, 1, 3, 40, 64, generator=generator).unbind(0)
    mask = torch.zeros(1, 1, 1, 40).masked_fill(torch.arange(40) < hidden, torch.finfo(torch.float32).min)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.125)
    monkeypatch.setattr(attention, "sdpa_attention_forward", None)  # not called
    out, _ = attention.grouped_sdpa_attention(module, query, key, value, mask, scaling=0.125)
    assert out.shape == (1, 1, 9, 64) and torch.equal(out, expected)

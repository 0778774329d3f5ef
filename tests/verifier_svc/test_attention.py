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

"""The target's linear layers computed weight first (linear_layout.py): the products of
F.linear, on only the passes of a TargetModel, and the transformers model left as it was."""

from __future__ import annotations

import pytest
import torch

from verifier_svc.linear_layout import MAX_WEIGHT_FIRST_ROWS, SwitchableLinear, linear_switch, weight_first_linear
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain


@pytest.mark.parametrize("shape", [(576,), (1, 576), (3, 576), (2, 5, 576), (1, 1, 576)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_weight_first_is_f_linear(shape: tuple[int, ...], with_bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator)
    weight = torch.randn(1536, 576, generator=generator) / 24
    bias = torch.randn(1536, generator=generator) if with_bias else None
    out = weight_first_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 1536) and out.is_contiguous()
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_the_switch_runs_few_rows_weight_first_and_is_off_between_passes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
    model[2].weight = model[0].weight  # tied weights stay tied
    switch = linear_switch(model)
    assert linear_switch(model) is switch and all(type(m) is SwitchableLinear for m in (model[0], model[2]))
    assert model[2].weight is model[0].weight
    calls: list[int] = []
    monkeypatch.setattr(
        "verifier_svc.linear_layout.weight_first_linear",
        lambda x, w, b: calls.append(x.numel() // x.shape[-1]) or torch.nn.functional.linear(x, w, b),
    )
    few, many = torch.randn(3, 8), torch.randn(MAX_WEIGHT_FIRST_ROWS + 1, 8)
    model(few)
    assert calls == []  # off: nn.Linear's own product
    with switch.set(True):
        model(few), model(many)
    assert calls == [3, 3]  # on, for few rows only
    model(few)
    assert calls == [3, 3] and switch.weight_first is False


def test_passes_in_either_layout_give_the_same_logits(reference_model, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A prefill, a one-token pass and a tree pass, weight first and through F.linear; and the
    model answers transformers' own calls after them exactly as before."""
    prompt = tokenizer.encode("Speculative decoding makes a large model generate faster by")
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        before = reference_model(ids).logits
    results = []
    for weight_first in (True, False):
        target = TargetModel(reference_model, "layout")
        assert target.backend.weight_first  # the CPU default until tuned
        target.backend.weight_first = weight_first
        cache = target.new_cache()
        prefill = target.score(cache, prompt[:-1], chain([]))
        one = target.score(cache, prompt[-1:], chain([]))
        tree = target.score(cache, [11], build_tree([42, 7, 8, 9], [ROOT, ROOT, 0, 1]))
        results.append((prefill, one, tree))
    for weight_first, linear in zip(*results):
        torch.testing.assert_close(weight_first, linear, atol=2e-4, rtol=1e-4)
    with torch.inference_mode():
        assert torch.equal(reference_model(ids).logits, before)

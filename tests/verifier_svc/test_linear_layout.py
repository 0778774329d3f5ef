"""The target's linear layers computed weight first (linear_layout.py): the products of
F.linear, on only the passes of a TargetModel, and the transformers model left as it was."""

from __future__ import annotations

import pytest
import torch

from verifier_svc.linear_layout import (
    FLOAT32_MIN_ROWS,
    MAX_WEIGHT_FIRST_ROWS,
    SwitchableLinear,
    copy_blocks,
    drop_float32_copies,
    drop_one_row_copies,
    drop_onednn_copies,
    float32_copies,
    float32_linear,
    linear_switch,
    one_row_copies,
    one_row_copy,
    one_row_linear,
    onednn_copies,
    onednn_copy,
    onednn_linear,
    onednn_ready,
    weight_first_linear,
)
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
        assert target.backend.weight_first and target.backend.one_row  # the CPU defaults until tuned
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


@pytest.mark.parametrize("shape", [(576,), (1, 576), (1, 1, 576)])
@pytest.mark.parametrize("blocks", [2, 3, 4])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_one_row_product_from_the_copy_is_f_linear(shape: tuple[int, ...], blocks: int, with_bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator)
    weight = torch.randn(1536, 576, generator=generator) / 24
    bias = torch.randn(1536, generator=generator) if with_bias else None
    out = one_row_linear(x, one_row_copy(weight, blocks), bias)
    assert out.shape == (*shape[:-1], 1536) and out.is_contiguous()
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_copy_blocks_divide_the_input_one_a_thread_at_most() -> None:
    assert copy_blocks(576, 2) == 2 and copy_blocks(576, 5) == 4 and copy_blocks(576, 16) == 16
    assert copy_blocks(577, 2) == 1 and copy_blocks(576, 0) == 1


def test_one_row_products_read_the_copies_only_where_switched_on(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 7))
    model[2].weight = model[0].weight  # tied weights share one copy
    odd = torch.nn.Linear(7, 8)  # 7 inputs do not divide into blocks: no copy
    model.append(odd)
    switch = linear_switch(model)
    made = one_row_copies(model, threads=2)
    assert model[0].one_row_weight is model[2].one_row_weight and odd.one_row_weight is None
    assert made == 4 * (8 * 8 + 7 * 8)
    calls: list[str] = []
    monkeypatch.setattr(
        "verifier_svc.linear_layout.one_row_linear", lambda x, c, b: calls.append("copy") or torch.zeros(*x.shape[:-1], c.shape[2])
    )
    monkeypatch.setattr(
        "verifier_svc.linear_layout.weight_first_linear",
        lambda x, w, b: calls.append("weight first") or torch.nn.functional.linear(x, w, b),
    )
    one, two = torch.randn(1, 8), torch.randn(2, 8)
    with switch.set(True, one_row=True):
        model[0](one), model[0](two), odd(torch.randn(1, 7))
    assert calls == ["copy", "weight first", "weight first"]
    with switch.set(True):  # one_row off
        model[0](one)
    with switch.set(False, one_row=True):  # F.linear reads no copy
        model[0](one)
    drop_one_row_copies(model)
    with switch.set(True, one_row=True):  # dropped: weight first
        model[0](one)
    assert calls == ["copy", "weight first", "weight first", "weight first", "weight first"]
    assert switch.one_row is False and all(m.one_row_weight is None for m in (model[0], model[2], model[3]))


def test_a_one_token_pass_reads_every_layers_one_row_copy(reference_model, tokenizer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Where memory allows (this host), a one-token pass of the default model reads the one-row
    copy of each of its linear layers, and a two-token pass none (a prefill's output head reads
    its copy: only the last row's logits are kept)."""
    import verifier_svc.linear_layout as linear_layout

    reads: list[int] = []
    real = linear_layout.one_row_linear
    monkeypatch.setattr(linear_layout, "one_row_linear", lambda x, c, b: reads.append(c.shape[0]) or real(x, c, b))
    target = TargetModel(reference_model, "one row")
    assert target.backend.one_row
    prompt = tokenizer.encode("Speculative decoding makes a large model generate faster by")
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))
    reads.clear()
    target.score(cache, prompt[-1:], chain([7]))
    assert reads == []
    target.score(cache, [11], chain([]))
    layers = [m for m in reference_model.modules() if isinstance(m, SwitchableLinear)]
    assert len(reads) == len(layers) == 211 and set(reads) == {torch.get_num_threads()}


@pytest.mark.parametrize("shape", [(4, 576), (8, 576), (2, 5, 576), (MAX_WEIGHT_FIRST_ROWS + 1, 576)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_product_from_the_float32_copy_is_f_linear_in_float32_rounded_back(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Products of two narrow values are exact in float32: the copy's product is the float32
    product of the narrow operands, rounded back (up to the summation order), and so within a
    rounding step of the narrow F.linear's."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator).to(dtype)
    weight = (torch.randn(1536, 576, generator=generator) / 24).to(dtype)
    bias = torch.randn(1536, generator=generator).to(dtype)
    out = float32_linear(x, weight.float(), bias)
    assert out.dtype == dtype and out.shape == (*shape[:-1], 1536) and out.is_contiguous()
    wide = torch.nn.functional.linear(x.float(), weight.float(), bias.float())
    torch.testing.assert_close(out.float(), wide.to(dtype).float(), atol=1e-5, rtol=2 ** -7)  # a bfloat16 step at most
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, bias), atol=2e-2, rtol=2e-2)


def test_products_of_several_rows_read_the_float32_copies_only_where_switched_on(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 7)).to(torch.bfloat16)
    model[1].weight = model[0].weight  # tied weights share one copy
    switch = linear_switch(model)
    assert float32_copies(model) == 4 * (8 * 8 + 7 * 8)
    assert model[0].float32_weight is model[1].float32_weight and model[2].float32_weight.dtype == torch.float32
    calls: list[str] = []
    monkeypatch.setattr("verifier_svc.linear_layout.float32_linear", lambda x, w, b: calls.append("float32") or torch.zeros(*x.shape[:-1], w.shape[0], dtype=x.dtype))
    few, many = torch.randn(FLOAT32_MIN_ROWS - 1, 8).to(torch.bfloat16), torch.randn(FLOAT32_MIN_ROWS, 8).to(torch.bfloat16)
    with switch.set(False, float32_rows=True):
        assert model[0](few).dtype == torch.bfloat16  # fewer rows: the narrow weights
        model[0](many), model[2](many)
    assert calls == ["float32", "float32"]
    with switch.set(True):  # float32_rows off
        model[0](many)
    drop_float32_copies(model)
    with switch.set(True, float32_rows=True):  # dropped
        model[0](many)
    assert calls == ["float32", "float32"]
    assert switch.float32_rows is False and all(m.float32_weight is None for m in model)


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@needs_onednn
@pytest.mark.parametrize("shape", [(576,), (3, 576), (2, 5, 576), (16, 576)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_product_from_the_onednn_copy_is_f_linear(shape: tuple[int, ...], with_bias: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator)
    weight = torch.randn(1536, 576, generator=generator) / 24
    bias = torch.randn(1536, generator=generator) if with_bias else None
    out = onednn_linear(x, onednn_copy(weight), bias)
    assert out.shape == (*shape[:-1], 1536)
    torch.testing.assert_close(out, torch.nn.functional.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
    transposed = x.reshape(-1, 576).t().contiguous().t()  # a view that is not contiguous
    torch.testing.assert_close(onednn_linear(transposed, onednn_copy(weight), bias).reshape(out.shape), out)


needs_bfloat16_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no oneDNN bfloat16 kernels for this CPU"
)


@needs_bfloat16_onednn
@pytest.mark.parametrize("shape", [(576,), (4, 576), (2, 5, 576)])
def test_a_bfloat16_product_from_the_onednn_copy_is_f_linear_within_a_step(shape: tuple[int, ...]) -> None:
    """Both sum bfloat16 products in float32 and round once: only the order of the sum differs."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator).bfloat16()
    weight = (torch.randn(1536, 576, generator=generator) / 24).bfloat16()
    bias = torch.randn(1536, generator=generator).bfloat16()
    assert onednn_ready(weight) and not onednn_ready(weight.half())
    out = onednn_linear(x, onednn_copy(weight), bias)
    assert out.shape == (*shape[:-1], 1536) and out.dtype == torch.bfloat16
    exact = torch.nn.functional.linear(x.double(), weight.double(), bias.double())
    step = 2.0 ** (torch.floor(torch.log2(exact.abs().clamp_min(1e-3))) - 7)  # a bfloat16 step at each value
    assert ((out.double() - exact).abs() <= step).all()
    assert ((torch.nn.functional.linear(x, weight, bias).double() - exact).abs() <= step).all()


@needs_onednn
def test_products_of_enough_rows_read_the_onednn_copies_only_where_switched_on(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 7).to(torch.float16))
    model[1].weight = model[0].weight  # tied weights share one copy
    switch = linear_switch(model)
    assert onednn_copies(model) == 4 * 8 * 8  # the float32 weight only: no float16 copies
    assert model[0].onednn_weight is model[1].onednn_weight and model[2].onednn_weight is None
    calls: list[int] = []
    monkeypatch.setattr("verifier_svc.linear_layout.onednn_linear", lambda x, w, b: calls.append(x.numel() // x.shape[-1]) or torch.zeros(*x.shape[:-1], 8))
    few, many = torch.randn(3, 8), torch.randn(4, 8)
    with switch.set(True, onednn_min_rows=4):
        model[0](few), model[1](many), model[2](many.to(torch.float16))  # no copy: its own product
    assert calls == [4]
    with switch.set(True):  # onednn_min_rows 0: none read
        model[0](many)
    drop_onednn_copies(model)
    with switch.set(True, onednn_min_rows=4):  # dropped
        model[0](many)
    assert calls == [4] and switch.onednn_min_rows == 0 and all(m.onednn_weight is None for m in model)

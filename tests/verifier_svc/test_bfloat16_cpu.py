"""The default model served in bfloat16 on CPU, in the linear layouts the CPU backend may pick
(weight first, F.linear; passes of several tokens from float32 copies of the weights or not;
every product from oneDNN copies of the bfloat16 weights) and
with int8 weights (`--quantization int8`, whose reference is the same quantized model): greedy
passes give transformers' own greedy generate() in bfloat16, a tree's path gives its chain's
logits, and a batched pass gives each lone pass's logits.

Two computations of the same bfloat16 logits that sum in another order (other matrix shapes,
another layout) differ by a few bfloat16 steps (0.125 at logits of 16-32, 0.25 at 32-64), so
logits are compared within LOGIT_ATOL and a greedy token may differ from generate()'s only
where the reference's own logits of the two are within GREEDY_TIE; the rest of that output is
then not compared (as tests/integration/test_dtype.py bounds it through the services).
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import bfloat16_default_model
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.linear_layout import onednn_copies
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain

LOGIT_ATOL = 1.5
GREEDY_TIE = 0.5  # two bfloat16 steps at logits of 32-64, at most
NEW_TOKENS = 12
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n\n    return"]


@pytest.fixture(scope="module")
def bf16_models():  # type: ignore[no-untyped-def]
    """quantization -> the model, loaded on first use."""
    loaded: dict = {}

    def model(quantization: str):  # type: ignore[no-untyped-def]
        if quantization not in loaded:
            loaded[quantization] = bfloat16_default_model(quantization)
        return loaded[quantization]

    return model


# (weight first, float32 copies, oneDNN copies, quantization): the served choice is what tuning
# times fastest; int8 layers are neither switched nor copied.
LAYOUTS = {
    "weight first": (True, False, False, "none"), "F.linear": (False, False, False, "none"),
    "F.linear, float32 copies": (False, True, False, "none"), "int8 weights": (True, True, False, "int8"),
    "oneDNN copies": (False, False, True, "none"),
}


def _target(bf16_models, layout: str):  # type: ignore[no-untyped-def]
    """(the target, its reference model) in this layout (oneDNN copies: every product from them)."""
    weight_first, float32_copies, onednn, quantization = LAYOUTS[layout]
    if onednn and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no oneDNN bfloat16 kernels for this CPU")
    model = bf16_models(quantization)
    target = TargetModel(model, "bf16", float32_copies=float32_copies)
    assert getattr(target.backend, "float32_rows") is (float32_copies and quantization == "none")  # this host has the memory
    target.backend.weight_first = weight_first
    if onednn:
        assert onednn_copies(model) > 0
        target.backend.onednn_min_rows = 1
    return target, model


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bfloat16_greedy_equals_generate(bf16_models, tokenizer, layout: str) -> None:  # type: ignore[no-untyped-def]
    """One-token passes (plain decoding) and one pass over generate()'s continuation as a drafted chain."""
    target, bf16_model = _target(bf16_models, layout)
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        with torch.inference_mode():
            x = torch.tensor([ids])
            reference = bf16_model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=NEW_TOKENS)[0, len(ids):].tolist()
        cache = target.new_cache()
        target.score(cache, ids[:-1], chain([]))
        plain = []
        for _ in range(NEW_TOKENS):
            plain.append(int(target.score(cache, [ids[-1] if not plain else plain[-1]], chain([]))[0].argmax()))
        cache.truncate(len(ids) - 1)
        chained = target.score(cache, ids[-1:], chain(reference[:-1])).argmax(-1).tolist()
        for ours in (plain, chained):
            j = next((j for j, (a, b) in enumerate(zip(ours, reference)) if a != b), None)
            if j is None:
                continue
            with torch.inference_mode():
                logits = bf16_model(torch.tensor([ids + reference[:j]])).logits[0, -1].float()
            gap = abs((logits[reference[j]] - logits[ours[j]]).item())
            assert gap <= GREEDY_TIE, f"{prompt!r}: token {j} differs where the reference has no near tie ({gap:.3f})"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bfloat16_tree_path_is_its_chain_and_batched_is_lone(bf16_models, tokenizer, layout: str) -> None:  # type: ignore[no-untyped-def]
    target, _ = _target(bf16_models, layout)
    ids = tokenizer.encode(PROMPTS[0])
    tree = build_tree([42, 7, 8, 9], [ROOT, ROOT, 0, 1])  # paths 42-8 and 7-9
    lone, caches = [], []
    for _ in range(2):
        cache = target.new_cache()
        target.score(cache, ids[:-1], chain([]))
        caches.append(cache)
    lone_tree = target.score(caches[0], ids[-1:], tree)
    caches[0].truncate(len(ids) - 1)
    path = target.score(caches[0], ids[-1:], chain([7, 9]))
    torch.testing.assert_close(lone_tree[[0, 2, 4]], path, atol=LOGIT_ATOL, rtol=0)
    caches[0].truncate(len(ids) - 1)
    short = target.new_cache()
    target.score(short, ids[:3], chain([]))
    lone_short = target.score(short, [ids[3]], chain([11]))
    short.truncate(3)
    batched = score_batch(target, [PassInput(caches[0], ids[-1:], tree), PassInput(short, [ids[3]], chain([11]))])
    torch.testing.assert_close(batched[0], lone_tree, atol=LOGIT_ATOL, rtol=0)
    torch.testing.assert_close(batched[1], lone_short, atol=LOGIT_ATOL, rtol=0)

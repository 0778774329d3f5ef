"""Weight-only int8 linear layers (`--quantization int8`, verifier_svc/int8_weights.py): a layer
computes its dequantized weight's product, a row's output does not depend on the other rows of
its pass, quantizing a model replaces every linear layer (a tied head once, its embedding kept),
the options that cannot be served are refused with their reason, and on every architecture of
tests/model_matrix.py a tree pass of the quantized model gives each node its path's logits as
transformers' own forward of the same quantized model computes them, batched as alone.

The default model through these layers, against transformers' generate() of the same quantized
model: tests/verifier_svc/test_bfloat16_cpu.py (in-process) and tests/integration/test_dtype.py
(through the services).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

from tests.model_matrix import ARCHITECTURES, LLAMA_LIKE, VOCAB, path_tokens, plain_logits
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.int8_weights import Int8Linear, int8_per_channel, quantization_error, quantize_linear_layers
from verifier_svc.model_loader import load_model, resolve_dtype
from verifier_svc.server import main
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain

# bfloat16 logits (std ~3 in the matrix) computed in another summation order and attention
# (grouped SDPA against eager), as in test_bfloat16_cpu.py: 0-0.22 apart on the 16 architectures
# when measured; a wrong mask, window or position moves them by whole units. A batched pass and
# its lone passes were equal (0.0 on each): they are held to one bfloat16 step at logits of 8-16.
MATRIX_LOGIT_ATOL = 0.3
BATCHED_ATOL = 0.0625


def test_a_layer_computes_its_dequantized_weights_product() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96).to(torch.bfloat16)
    values, scales = int8_per_channel(linear.weight)
    layer = Int8Linear(values, scales, linear.bias)
    served = layer.dequantized()
    step = scales.float()[:, None]
    assert ((linear.weight.float() - served).abs() <= 0.51 * step).all()  # the nearest int8 value for each weight
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    expected = F.linear(x.float(), served, linear.bias.float())
    torch.testing.assert_close(layer(x).float(), expected, atol=0.02, rtol=0.01)  # bfloat16 outputs of ~1
    assert layer(x).shape == (3, 5, 96) and layer(x).dtype == torch.bfloat16
    assert layer(x.float()).dtype == torch.float32  # other inputs converted in and out


def test_a_rows_output_does_not_depend_on_the_other_rows_of_its_pass() -> None:
    """What a batched pass = lone passes and a tree = its chain rest on, product by product."""
    torch.manual_seed(1)
    layer = Int8Linear(*int8_per_channel(torch.randn(1536, 576) / 20), None)
    rows = torch.randn(9, 576).to(torch.bfloat16)
    together = layer(rows)
    for count in (1, 2, 3, 5):
        assert torch.equal(layer(rows[:count]), together[:count])
    assert torch.equal(layer(rows[4:5]), together[4:5])


def test_every_linear_layer_is_quantized_and_a_tied_head_once() -> None:
    config = transformers.LlamaConfig(**dict(LLAMA_LIKE, tie_word_embeddings=True))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    embedding = model.get_input_embeddings().weight.detach().clone()
    linear_bytes = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    made = quantize_linear_layers(model)
    assert not [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert len(layers) == 7 * 2 + 1  # q, k, v, o, gate, up, down in each of 2 layers, and the head
    assert made == sum(linear_bytes.values()) + 2 * sum(m.out_features for m in layers)  # int8 values + bfloat16 scales
    assert torch.equal(model.get_input_embeddings().weight, embedding)  # the embedding keeps its values
    head = model.get_output_embeddings()
    assert isinstance(head, Int8Linear) and torch.equal(head.values, int8_per_channel(embedding)[0])


def test_quantization_options_that_cannot_be_served_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert quantization_error("none", "cuda", "float32") is None
    assert quantization_error("int8", "cpu", "auto") is None
    assert quantization_error("int8", "cpu", "bfloat16") is None
    assert quantization_error("int4", "cpu", "auto") == "'int4' is not one of none, int8"
    assert quantization_error("int8", "cuda", "auto") == "int8 weights are served on CPU only (got --device cuda)"
    assert "bfloat16 activations" in str(quantization_error("int8", "cpu", "float32"))
    assert resolve_dtype("auto", "cpu", "int8") == torch.bfloat16 and resolve_dtype("auto", "cpu") == torch.float32
    with pytest.raises(SystemExit) as exit_:
        main(["--port", "0", "--quantization", "int8", "--dtype", "float16"])
    assert exit_.value.code == "verifier: --quantization: int8 weights are served with bfloat16 activations (--dtype bfloat16 or auto; got float16)"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_architecture_quantized_scores_trees_as_its_own_forward(name: str, matrix_model_folder) -> None:  # type: ignore[no-untyped-def]
    folder = matrix_model_folder(name)
    model = load_model(folder, "cpu", torch.bfloat16)
    quantize_linear_layers(model)
    target = TargetModel(model, name)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16, attn_implementation="eager").eval()
    quantize_linear_layers(reference)
    rng = random.Random(7)
    context = [rng.randrange(3, VOCAB) for _ in range(24)]  # longer than the matrix's windows
    tree = build_tree([rng.randrange(3, VOCAB) for _ in range(5)], [ROOT, 0, 0, 1, ROOT])
    cache = target.new_cache()
    target.score(cache, context[:-1], chain([]))
    logits = target.score(cache, context[-1:], tree)
    expected = torch.stack([plain_logits(reference, context)] + [plain_logits(reference, context + path_tokens(tree, i)) for i in range(len(tree))])
    worst = (logits - expected).abs().max().item()
    assert worst < MATRIX_LOGIT_ATOL, f"{name}: int8 tree logits differ from the quantized model's own forward by {worst:.3g}"
    cache.truncate(len(context) - 1)
    other = target.new_cache()
    target.score(other, context[:10], chain([]))
    lone_other = target.score(other, [context[10]], chain([context[11]]))
    other.truncate(10)
    batched = score_batch(target, [PassInput(cache, context[-1:], tree), PassInput(other, [context[10]], chain([context[11]]))])
    torch.testing.assert_close(batched[0], logits, atol=BATCHED_ATOL, rtol=0)
    torch.testing.assert_close(batched[1], lone_other, atol=BATCHED_ATOL, rtol=0)


def test_start_up_timing_of_an_int8_model_times_one_layout(monkeypatch: pytest.MonkeyPatch, matrix_model_folder) -> None:  # type: ignore[no-untyped-def]
    """Its layers are not switchable (linear_layout.py), so weight first and F.linear are the
    same pass: the CPU backend times it once, not twice."""
    from verifier_svc.backends import cpu_tuning
    from verifier_svc.linear_layout import switchable_layers

    model = load_model(matrix_model_folder("llama"), "cpu", torch.bfloat16)
    quantize_linear_layers(model)
    target = TargetModel(model, "llama")
    layouts: list[bool] = []
    timed = cpu_tuning.lone_pass_seconds

    def recorded(*args):  # type: ignore[no-untyped-def]
        layouts.append(target.backend.weight_first)
        return timed(*args)

    monkeypatch.setattr(cpu_tuning, "lone_pass_seconds", recorded)
    target.tune_pass_sizes(context_tokens=16, max_tokens=4, repeats=2)
    assert not switchable_layers(model) and target.min_pass_tokens == 1
    assert len(layouts) >= 8 and set(layouts) == {True}  # 4 sizes x 2 sweeps, one layout

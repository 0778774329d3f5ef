"""Compiled decoder layers (verifier_svc/backends/compiled_layers.py), what a CUDA backend records
its graphs with by default (`--cuda-compiled layers`) and compiled CPU passes run in groups: the
layers are found, grouped by attention kind and handed their slot layers (by keyword or by
position) in every architecture of the model matrix, checked with the group function run
eagerly; on this CPU (inductor, float32), static tree passes run under them give each node the
logits of its path scored as a plain sequence, over Llama's layout and Gemma 2's (mixed sliding
and full layers, soft caps, eager attention), one layer and several a call, across key lengths
and sizes in a few compiles; they run compiled only under `active()`.
tests/verifier_svc/test_cuda.py checks the recorded passes on a GPU."""

from __future__ import annotations

import random

import pytest
import torch
import torch._dynamo.utils
from transformers import AutoModelForCausalLM

from tests.model_matrix import ARCHITECTURES, VOCAB, WINDOW, build_model
from tests.verifier_svc.test_model_matrix import score_rounds
from tests.verifier_svc.test_static_pass import slot_target
from verifier_svc.backends import compiled_layers
from verifier_svc.backends.compiled_layers import CompiledLayers, decoder_layers, group_step, layer_groups
from verifier_svc.model_loader import load_model
from verifier_svc.static_pass import StaticPass
from verifier_svc.token_tree import chain

# Compiles of one model's layers over every size and key length: one row, then any; once more
# per attention kind; and the final norm's two.
MAX_COMPILES = 8


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_the_decoder_layers_are_found_in_every_architecture(name: str) -> None:
    model = build_model(name)
    layers = decoder_layers(model)
    assert len(layers) == model.config.num_hidden_layers
    assert all("Layer" in type(layer).__name__ or "Block" in type(layer).__name__ for layer in layers), [type(m).__name__ for m in layers]


def test_layer_groups_are_consecutive_runs_of_one_attention_kind() -> None:
    from transformers import Gemma2Config, LlamaConfig

    assert layer_groups(LlamaConfig(), 7, 3) == [range(0, 3), range(3, 6), range(6, 7)]
    assert layer_groups(LlamaConfig(), 4, 1) == [range(i, i + 1) for i in range(4)]
    kinds = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]
    assert layer_groups(Gemma2Config(layer_types=kinds, num_hidden_layers=6), 6, 2) == [range(0, 2), range(2, 3), range(3, 5), range(5, 6)]


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_architecture_runs_its_layers_through_the_group_function(name: str, group: int, matrix_model_folder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The group function run eagerly in place of its compiled self: a static pass under the
    layers gives the model's logits, each group's layers run once, by one call, with their own
    slot layers."""
    calls: list[int] = []

    def counted(layers, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(layers))
        return group_step(layers, *args, **kwargs)

    monkeypatch.setattr(compiled_layers, "_compiled_step", counted)
    model = load_model(matrix_model_folder(name), "cpu", torch.float32)
    target, backend = slot_target(model, name)
    layers = CompiledLayers(model, group=group)
    assert backend.passes is not None
    cache = target.new_cache()
    target.score(cache, list(range(3, 3 + WINDOW + 4)), chain([]))
    with torch.inference_mode():
        expected = target.score(cache, [7], chain([8, 9]))
        cache.truncate(WINDOW + 4)
        backend.passes.make_runner = lambda static: LayersRunner(static, layers)
        backend.passes.runners.clear()
        got = target.score(cache, [7], chain([8, 9]))
    assert sorted(calls) == sorted(len(run) for run in layers.groups), "one call a group"
    assert max(calls) == min(group, max(len(run) for run in layer_groups(model.config, len(layers.layers), group)))
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


class LayersRunner:
    """A StaticPass run under compiled layers (what cuda_graphs.GraphRunner records)."""

    def __init__(self, static: StaticPass, layers: CompiledLayers) -> None:
        self.static, self.layers = static, layers
        self.runs = 0

    def run(self) -> torch.Tensor:
        self.runs += 1
        with self.layers.active():
            return self.static.forward()


def dynamo_compiles() -> int:
    """Frames dynamo has compiled in this process (compiled_step's shapes among them)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


@pytest.mark.parametrize(("name", "group"), [("llama", 1), ("gemma2", 1), ("llama", 2)])
def test_static_tree_passes_under_compiled_layers_score_each_path_as_a_plain_sequence(name: str, group: int, matrix_model_folder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    compiled = compiled_layers.compiled_step()  # the real one (tests before this may have compiled its shapes)
    calls: list[int] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return compiled(*args, **kwargs)

    monkeypatch.setattr(compiled_layers, "_compiled_step", counted)
    folder = matrix_model_folder(name)
    model = load_model(folder, "cpu", torch.float32)
    target, backend = slot_target(model, name)
    layers = CompiledLayers(model, group=group)
    assert backend.passes is not None
    backend.passes.make_runner = lambda static: LayersRunner(static, layers)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    rng = random.Random(7)
    prompt = [rng.randrange(3, VOCAB) for _ in range(WINDOW + 9)]
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))  # a prefill: eager, the layers as written
    before = dynamo_compiles()
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], (0, 9, 3, 12, 1, 5))
    runs = sum(runner.runs for runner in backend.passes.runners.values())  # type: ignore[attr-defined]
    assert runs == 6, "every round ran as a static pass under compiled layers"
    assert calls, "the layers ran through the compiled group function"
    assert dynamo_compiles() - before <= MAX_COMPILES
    assert all(layer._compiled_call_impl is None for layer in layers.layers), "compiled only under active()"
    assert layers.count == model.config.num_hidden_layers + 1  # the layers and the final norm

"""The compiled stateless blocks (verifier_svc/backends/compiled_blocks.py) that a CUDA backend
records its graphs with under `--cuda-compiled blocks`: which blocks they are (none within the
modules named outside them), that they run compiled only under `active()`,
and that a static pass under them gives the logits of the model as written (float32, inductor on
this CPU; tests/verifier_svc/test_cuda.py checks the same on a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM, LlamaConfig

from verifier_svc.backends.compiled_blocks import CompiledBlocks, stateless_blocks
from verifier_svc.layer_masks import layer_windows
from verifier_svc.static_pass import SlotPasses
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

LAYERS = 2


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def test_the_blocks_are_the_norms_and_mlps(model: torch.nn.Module) -> None:
    names = sorted(type(b).__name__ for b in stateless_blocks(model))
    # Two norms and an MLP a layer, and the final norm; the MLP's inner modules are not blocks of their own.
    assert names == ["LlamaMLP"] * LAYERS + ["LlamaRMSNorm"] * (2 * LAYERS + 1)
    outside = stateless_blocks(model, outside=list(model.model.layers))
    assert outside == [model.model.norm]  # what compiled layers compile besides the layers


def test_a_static_pass_under_compiled_blocks_gives_the_models_logits(model: torch.nn.Module) -> None:
    blocks = CompiledBlocks(model)
    graphs = counters["stats"]["unique_graphs"]
    target = TargetModel(model, "tiny")
    passes = SlotPasses(model, layer_windows(model.config), 1, 256, (1, 4))
    cache = passes.new_cache()
    target.score(cache, list(range(3, 40)), chain([]))
    started = len(cache)
    for real in (1, 3):
        runner = passes.runner(cache, started, real)
        assert runner is not None
        mask = torch.tril(torch.ones(real, started + real, dtype=torch.bool), diagonal=started)
        positions = torch.arange(started, started + real)
        ids = list(range(50, 50 + real))
        with torch.inference_mode():
            runner.static.load(ids, positions, mask, started)
            written = runner.run()[0, :real].clone()
            with blocks.active():
                assert all(b._compiled_call_impl is not None for b in blocks.blocks)
                runner.static.load(ids, positions, mask, started)
                compiled = runner.run()[0, :real].clone()
        assert all(b._compiled_call_impl is None for b in blocks.blocks), "compiled only under active()"
        assert torch.allclose(compiled, written, atol=1e-4), (compiled - written).abs().max()
        assert compiled.abs().max() > 0.1  # real logits, not zeros
    assert counters["stats"]["unique_graphs"] > graphs, "the blocks ran compiled"

"""The ONNX export computes the model's own logits with its KV cache carried between calls, any
split of the sequence, a token tree's mask included; int8 quantization stays close. Run as the
drafter runs a build (drafter_svc/draft_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from drafter_build.build import rebuild_reason
from drafter_build.llama_graph import GRAPH_VERSION
from drafter_build.onnx_export import choose_graph
from drafter_svc.draft_model import DraftModel, causal_bias
from tests.drafter_build.tiny_model import VOCAB, tiny_drafter_folder, tiny_model

TOKENS = [int(t) for t in torch.randint(0, VOCAB, (40,), generator=torch.Generator().manual_seed(1))]


def max_abs_logit_diff(model: torch.nn.Module, folder: Path, token_ids: list[int], split: int) -> float:
    """Largest |logit| difference between `model` (torch, full sequence) and the built drafter in
    `folder` run as the drafter runs it, in two calls (token_ids[:split] from an empty cache, then
    the rest on the same cache)."""
    drafter = DraftModel(folder)
    cache = drafter.empty_cache()
    rows = [drafter.run(token_ids[start:stop], range(start, stop), causal_bias(start, stop - start), cache) for start, stop in ((0, split), (split, len(token_ids)))]
    with torch.no_grad():
        expected = model(torch.tensor([token_ids])).logits[0].numpy()
    return float(np.abs(np.concatenate(rows) - expected).max())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return tiny_drafter_folder(tmp_path_factory.mktemp("tiny-float"))


@pytest.mark.parametrize("split", [1, 17, 39])
def test_cached_calls_give_the_models_logits(exported, split: int) -> None:  # type: ignore[no-untyped-def]
    model, folder = exported
    diff = max_abs_logit_diff(model, folder, TOKENS, split)
    print(f"split {split}: largest |logit difference| from torch {diff:.2e}")
    assert diff < 1e-4


@pytest.mark.parametrize("prefix_cached", [True, False], ids=["prefix-cached", "one-call-from-empty"])
def test_tree_mask_gives_each_node_its_paths_logits(exported, prefix_cached: bool) -> None:  # type: ignore[no-untyped-def]
    """Two siblings after a prefix, with a tree mask, in a call after the prefix's or in one call
    with it over an empty cache (the fused node then rotates as for a prompt: the call splits, see
    draft_cache.prompt_rows): each gets the logits of a chain over prefix + itself, the prefix its
    own (the mask and the positions are data)."""
    model, folder = exported
    drafter = DraftModel(folder)
    prefix, siblings = TOKENS[:10], [5, 7]
    cache = drafter.empty_cache()
    bias = np.full((12, 12), np.finfo(np.float32).min, np.float32)
    bias[:10, :10] = causal_bias(0, 10)
    bias[10:, :10] = 0.0
    bias[10, 10] = bias[11, 11] = 0.0  # each sibling sees the prefix and itself only
    if prefix_cached:
        drafter.run(prefix, range(10), bias[:10, :10], cache, last_only=True)
        logits = drafter.run(siblings, [10, 10], bias[10:], cache)
    else:
        logits = drafter.run(prefix + siblings, [*range(10), 10, 10], bias, cache)
        with torch.no_grad():
            assert np.abs(logits[:10] - model(torch.tensor([prefix])).logits[0].numpy()).max() < 1e-4
        assert cache.length == 12
        logits = logits[10:]
    with torch.no_grad():
        for i, token in enumerate(siblings):
            expected = model(torch.tensor([prefix + [token]])).logits[0, -1].numpy()
            assert np.abs(logits[i] - expected).max() < 1e-4


def test_a_calls_logits_stay_its_own_after_later_calls(exported) -> None:  # type: ignore[no-untyped-def]
    """The logits a call returns are not memory onnxruntime reuses for a later call's."""
    _, folder = exported
    drafter = DraftModel(folder)
    cache = drafter.empty_cache()
    first = drafter.run(TOKENS[:5], range(5), causal_bias(0, 5), cache)
    kept = first.copy()
    for i in range(5, 12):
        drafter.run([TOKENS[i]], [i], causal_bias(i, 1), cache)
    assert np.array_equal(first, kept)


def test_int8_quantization_changes_weights_but_stays_close(exported, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, folder = exported
    _, quantized = tiny_drafter_folder(tmp_path / "int8", quantize=True)
    diff = max_abs_logit_diff(model, quantized, TOKENS, 20)
    print(f"int8: largest |logit difference| from torch {diff:.3f}")
    assert 1e-4 < diff < 0.5
    assert (quantized / "model.onnx").stat().st_size < (folder / "model.onnx").stat().st_size


def test_manifest_describes_the_model_and_the_build(exported) -> None:  # type: ignore[no-untyped-def]
    model, folder = exported
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model"] == {
        "num_layers": 3, "num_kv_heads": 2, "head_dim": 16, "vocab_size": VOCAB,
        "num_parameters": sum(p.numel() for p in model.parameters()), "cache": "in_place", "max_positions": 512,
    }
    assert manifest["kind"] == "small" and manifest["target"]["tokenizer_fingerprint"] == "tiny-test-tokenizer"
    assert manifest["created_with"]["quantization"] == "none (float32)"
    assert manifest["created_with"]["graph"] == "llama" and manifest["created_with"]["graph_version"] == GRAPH_VERSION
    assert manifest["drafter"]["architecture"] == "LlamaForCausalLM"
    check = manifest["check"]
    assert check["passed"] and check["float32"]["passed"] and "int8" not in check
    assert check["float32"]["max_abs_logit_diff"] < 1e-4 < check["float32"]["tolerance"]
    assert rebuild_reason(folder) is None  # a passed build of the current graph is kept


def test_a_build_loads_without_onnxruntime_warnings(exported, capfd) -> None:  # type: ignore[no-untyped-def]
    """Every node's outputs declare their shapes: onnxruntime loads the graph and runs a call
    without a warning (a service's log starts clean)."""
    _, folder = exported
    capfd.readouterr()
    drafter = DraftModel(folder)
    drafter.run(TOKENS[:3], range(3), causal_bias(0, 3), drafter.empty_cache())
    assert "onnxruntime" not in capfd.readouterr().err


def test_int8_model_gives_each_token_nearly_the_same_logits_however_the_calls_are_split(tmp_path: Path) -> None:
    """Activations are quantized per row and block: a prompt run in one call and token by token
    agree to well within the quantization's own error (per-tensor dynamic scales did not)."""
    _, quantized = tiny_drafter_folder(tmp_path / "int8", quantize=True)
    drafter = DraftModel(quantized)
    whole = drafter.run(TOKENS, range(40), causal_bias(0, 40), drafter.empty_cache())
    cache = drafter.empty_cache()
    rows = [drafter.run([token], [i], causal_bias(i, 1), cache)[0] for i, token in enumerate(TOKENS)]
    diff = float(np.abs(whole - np.stack(rows)).max())
    print(f"int8, one call vs token by token: largest |logit difference| {diff:.2e}")
    assert diff < 0.05


def test_a_build_is_redone_unless_it_passed_its_check_with_the_current_graph(exported, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`specdec draft build` rebuilds a drafter built before the check, one that failed it, one of
    another graph version or graph, and one whose manifest cannot be read."""
    _, folder = exported
    manifest = json.loads((folder / "manifest.json").read_text())

    def reason(**changes: object) -> str | None:
        edited = json.loads(json.dumps(manifest))
        for path, value in changes.items():
            *parents, key = path.split("__")
            entry = edited
            for parent in parents:
                entry = entry[parent]
            if value is None:
                del entry[key]
            else:
                entry[key] = value
        (tmp_path / "manifest.json").write_text(json.dumps(edited))
        return rebuild_reason(tmp_path)

    assert reason() is None
    assert reason(check=None) == "built before the export check"
    assert reason(check__passed=False) == "its export check failed"
    assert reason(created_with__graph_version=None) == f"llama graph version 1, not {GRAPH_VERSION}"
    assert reason(drafter__model_dir="/elsewhere") == "built from /elsewhere, not the target"
    assert rebuild_reason(tmp_path / "missing") == "not built"
    (tmp_path / "manifest.json").write_text('{"created_with": ')  # a build cut off mid-write
    assert rebuild_reason(tmp_path) == "its manifest cannot be read"


def test_the_llama_graph_rotates_with_the_models_own_tables_and_leaves_length_dependent_ones_to_the_generic_graph(tmp_path: Path) -> None:
    """The fused attention node rotates q and k with tables of every position made from the
    model's rotary embedding: Llama 3's scaled one passes the check against torch. Dynamic NTK
    scaling changes its table with the sequence's length, so auto exports it generically."""
    _, folder = tiny_drafter_folder(tmp_path / "llama3", architecture="llama-llama3-rope")  # raises where the check fails
    assert json.loads((folder / "manifest.json").read_text())["created_with"]["graph"] == "llama"
    assert choose_graph(tiny_model("llama-dynamic-rope")) == "generic" and choose_graph(tiny_model("llama")) == "llama"


"""Export a transformers causal LM to ONNX with its KV cache as inputs and outputs (the contract
of drafter_build/onnx_contract.py), and optionally quantize its weights to int8 (onnxruntime's
MatMulNBits).

Offline only (torch + transformers); the drafter runs the result under onnxruntime, torch-free.
Two graphs: `generic` (generic_export.py: the model's own forward through torch's dynamo
exporter, any decoder-only architecture) and `llama` (llama_graph.py: a hand-written graph of
the Llama layout with fewer nodes per call, kept for that layout: docs/design/drafter-export.md).
`auto` picks `llama` for exactly LlamaForCausalLM, else `generic`. Every build is checked
against torch (export_check.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from drafter_build import generic_export, llama_graph
from drafter_build.onnx_contract import CONCATENATED, MODEL_FILE

GRAPHS = ("auto", "generic", "llama")
GRAPH_VERSIONS = {"generic": generic_export.GRAPH_VERSION, "llama": llama_graph.GRAPH_VERSION}
CACHE_CONTRACTS = {"generic": CONCATENATED, "llama": llama_graph.CACHE}  # onnx_contract.py


def choose_graph(model: nn.Module, requested: str = "auto") -> str:
    """The graph `model` is exported with: `requested`, or for auto the Llama graph where the
    model has the Llama layout. ValueError for the Llama graph of another architecture."""
    if requested not in GRAPHS:
        raise ValueError(f"unknown graph {requested!r}; expected one of {', '.join(GRAPHS)}")
    llama = llama_graph.is_llama_layout(model)
    if requested == "llama" and not llama:
        raise ValueError(f"the llama graph exports only LlamaForCausalLM, not {type(model).__name__}: use --graph generic")
    if requested == "auto":
        return "llama" if llama else "generic"
    return requested


def export(model: nn.Module, out_dir: Path, graph: str = "auto") -> Path:
    """Write out_dir/model.onnx (float32, weights in the same file or beside it) for `model`, a
    transformers causal LM in eval mode (loaded with attn_implementation="eager" for the generic
    graph); returns the file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILE
    if choose_graph(model, graph) == "llama":
        return llama_graph.export_llama(model, path)
    return generic_export.export_generic(model, path)


def quantize_int8(source: Path, target: Path, block_size: int = 32) -> Path:
    """int8 weights for every MatMul with a constant weight (the projections, MLPs and head):
    onnxruntime's MatMulNBits (8 bits, symmetric, one scale per block of `block_size` input
    channels) with int8 products (accuracy level 4: activations quantized on the fly per row
    and block), the fast CPU path: 10-15 ms a token for SmolLM2 where float32 products (level 1)
    took 146 ms. Per-row activation scales keep a token's result nearly independent of the
    other tokens in the call (2.9e-2 logits on a tiny model between one call and token by token;
    level 1: 1.7e-6). Not quantize_dynamic: its per-tensor activation scales let one token's
    outliers (the first token's massive activations) crush every other token's precision, and a
    prompt run in one call gave logits 9 units away from the same prompt run token by token."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), bits=8, block_size=block_size, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    target.parent.mkdir(parents=True, exist_ok=True)
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    return target


def model_shape(model: nn.Module) -> dict[str, int]:
    """What the drafter needs to size its cache: the cache the model's forward fills."""
    layers, heads, width = generic_export.cache_shape(model)
    return {
        "num_layers": layers,
        "num_kv_heads": heads,
        "head_dim": width,
        "vocab_size": model.config.get_text_config(decoder=True).vocab_size,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }


def write_manifest(out_dir: Path, manifest: dict[str, object]) -> Path:
    path = out_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path

"""Probe (2026-11-29): the int8 model drafter against one whose layers keep the target's own
4-bit values. The default target is a Q4_1 GGUF: every layer weight is d * q + m in blocks of 32
input channels (q in 0..15, d and m per block), which onnxruntime's MatMulNBits holds exactly as
4-bit codes with scale d (its implicit zero point 8) plus a small product of each block's input
sum with (m + 8 d). The built drafter instead re-quantizes those values to 8 bits; a plain
4-bit re-quantization (docs/design/int8-drafter.md) fell to alpha 0.68. For each graph, over
Spec-Bench prompts (the first 96 tokens of every 40th), alpha at T=1 (sum_x min(p, q), p the
float32 graph's distribution) and argmax agreement at every position, and the one-token step
after 256 cached tokens (blocks of 10 calls in turns).

    SPECDEC_BENCH_DIR=/work/shared/bench PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/faithful_4bit_probe.py
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bench.prompts import load_bench_questions
from drafter_build import onnx_export
from drafter_build.build import load_for_export
from drafter_svc.draft_model import DraftModel, causal_bias
from specdec.model_files import drafter_dir, tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.model_loader import model_dir

BLOCK = 32
CONTEXT = 256


def lattice(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(codes [N, K/32, 32] in 0..15, d [N, K/32], m [N, K/32]) where weight [K, N] is d * q + m
    in every block of 32 input channels (within float32 rounding); None where it is not."""
    k, n = weight.shape
    if k % BLOCK:
        return None
    blocks = weight.T.reshape(n, k // BLOCK, BLOCK).astype(np.float64)
    low, high = blocks.min(-1), blocks.max(-1)
    d = (high - low) / 15
    safe = np.where(d > 0, d, 1.0)
    codes = np.rint((blocks - low[..., None]) / safe[..., None])
    error = np.abs(codes * d[..., None] + low[..., None] - blocks).max(-1)
    if not (error <= 1e-3 * np.maximum(d, 1e-30)).all():
        return None
    return codes.astype(np.uint8), d.astype(np.float32), low.astype(np.float32)


def faithful(source: Path, target: Path, float_zero_points: bool = False) -> tuple[Path, int]:
    """`source`'s MatMuls whose weight lies on a 4-bit lattice rewritten as MatMulNBits (4 bits,
    their codes and d) plus the block-sum product; the rest quantized as the built drafter is."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(source))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    nodes, rewritten = [], 0
    for node in graph.node:
        found = lattice(numpy_helper.to_array(weights[node.input[1]])) if node.op_type == "MatMul" and node.input[1] in weights else None
        if found is None:
            nodes.append(node)
            continue
        codes, d, low = found
        n, blocks, _ = codes.shape
        k = blocks * BLOCK
        packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)  # [N, K/32, 16]
        base = f"{node.name or node.output[0]}_q4"
        graph.initializer.extend([
            numpy_helper.from_array(packed, f"{base}_B"),
            numpy_helper.from_array(d.reshape(-1), f"{base}_scales"),
            numpy_helper.from_array((low + 8 * d).T.copy(), f"{base}_offsets"),  # [K/32, N]
            numpy_helper.from_array(np.array([0, 0, blocks, BLOCK], np.int64), f"{base}_shape"),
        ])
        x = node.input[0]
        if float_zero_points:  # d * (q - zp) = d * q + m with zp = -m / d
            zp = np.where(d > 0, -low / np.where(d > 0, d, 1), 0).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(zp.reshape(-1), f"{base}_zp"))
            nodes.append(helper.make_node("MatMulNBits", [x, f"{base}_B", f"{base}_scales", f"{base}_zp"], [node.output[0]], domain="com.microsoft",
                                          K=k, N=n, bits=4, block_size=BLOCK, accuracy_level=4, name=f"{base}_mm"))
            rewritten += 1
            continue
        nodes += [
            helper.make_node("MatMulNBits", [x, f"{base}_B", f"{base}_scales"], [f"{base}_codes"], domain="com.microsoft",
                             K=k, N=n, bits=4, block_size=BLOCK, accuracy_level=4, name=f"{base}_mm"),
            helper.make_node("Reshape", [x, f"{base}_shape"], [f"{base}_blocks"], name=f"{base}_reshape"),
            helper.make_node("ReduceSum", [f"{base}_blocks", "q4_last_axis"], [f"{base}_sums"], keepdims=0, name=f"{base}_sum"),
            helper.make_node("MatMul", [f"{base}_sums", f"{base}_offsets"], [f"{base}_offset"], name=f"{base}_offmm"),
            helper.make_node("Add", [f"{base}_codes", f"{base}_offset"], [node.output[0]], name=f"{base}_add"),
        ]
        rewritten += 1
    graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), "q4_last_axis"))
    used = {i for node in nodes for i in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    rewritten_ops = {f"{n.name}" for n in nodes if n.op_type == "MatMulNBits"}
    quantizer = MatMulNBitsQuantizer(model, bits=8, block_size=BLOCK, is_symmetric=True, accuracy_level=4, nodes_to_exclude=list(rewritten_ops))
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    return target, rewritten


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main() -> None:
    built = drafter_dir("default", "quantized")
    work = Path(tempfile.mkdtemp())
    model = load_for_export(model_dir("default"))
    folders = {}
    for name in ("float32", "int8 (built)", "4-bit layers as the GGUF's, head int8", "4-bit, float zero points"):
        folder = work / str(len(folders))
        folder.mkdir()
        shutil.copy(built / "manifest.json", folder / "manifest.json")
        folders[name] = folder
    float_path = onnx_export.export(model, folders["float32"], "llama")
    onnx_export.quantize_int8(float_path, folders["int8 (built)"] / "model.onnx")
    _, rewritten = faithful(float_path, folders["4-bit layers as the GGUF's, head int8"] / "model.onnx")
    faithful(float_path, folders["4-bit, float zero points"] / "model.onnx", float_zero_points=True)
    print(f"{rewritten} products on the GGUF's 4-bit lattice", flush=True)
    models = {name: DraftModel(folder) for name, folder in folders.items()}
    variants = [name for name in models if name != "float32"]
    tokenizer = Tokenizer(tokenizer_dir("default"))
    questions = load_bench_questions()[::40]
    alpha: dict[str, list[float]] = {name: [] for name in variants}
    agree: dict[str, list[bool]] = {name: [] for name in variants}
    for question in questions:
        ids = tokenizer.encode(question["turns"][0])[:96]
        n = len(ids)
        logits = {name: m.run(ids, list(range(n)), causal_bias(0, n), m.empty_cache()) for name, m in models.items()}
        p = softmax(logits["float32"])
        for name in variants:
            q = softmax(logits[name])
            alpha[name] += list(np.minimum(p, q).sum(-1))
            agree[name] += list(p.argmax(-1) == q.argmax(-1))
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, 49152, CONTEXT)]
    caches = {}
    for name, m in models.items():
        caches[name] = m.empty_cache()
        m.run(prefix, list(range(CONTEXT)), causal_bias(0, CONTEXT), caches[name], last_only=True)
    times: dict[str, list[float]] = {name: [] for name in models}
    order = list(models)
    for turn in range(int(sys.argv[1]) if len(sys.argv) > 1 else 12):
        for name in order if turn % 2 == 0 else order[::-1]:
            m, cache = models[name], caches[name]
            for i in range(13):
                began = time.perf_counter()
                m.run([5000], [CONTEXT], causal_bias(CONTEXT, 1), cache)
                if i >= 3:
                    times[name].append(time.perf_counter() - began)
                cache.truncate(CONTEXT)
    print(f"{len(next(iter(alpha.values())))} positions of {len(questions)} prompts")
    for name in models:
        quality = f"alpha (T=1) {np.mean(alpha[name]):.3f}, argmax agreement {np.mean(agree[name]):.3f}, " if name in alpha else ""
        print(f"{name}: {quality}step {1000 * statistics.median(times[name]):.2f} ms (min {1000 * min(times[name]):.2f})")


if __name__ == "__main__":
    main()

"""Probe (2026-11-28): other quantizations of the int8 model drafter, against the one built
(MatMulNBits, 8 bits, symmetric blocks of 32, int8 products): larger blocks, and 4-bit layers
with the output head kept in 8 bits. For each, over Spec-Bench prompts (the first 96 tokens of
every 40th), alpha at T=1 (sum_x min(p, q), p the float32 graph's distribution) and argmax
agreement at every position, and the one-token step after 256 cached tokens (blocks of 10 calls
in turns, threads as the drafter runs them). Every graph is the float32 step exported from the
default target (the verifier's in-place graph, the drafter's layers and products) quantized here.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/drafter_quantization_probe.py

It runs at the commit it was run at, 7bcedd2 (its verifier_svc/backends/onnx_step_graph.py and
that graph's contract have since gone): `git worktree add /tmp/probe 7bcedd2` and run it there.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from bench.prompts import load_bench_questions
from specdec.model_files import tokenizer_dir
from specdec.onnx_threads import session_options
from specdec.tokenizer import Tokenizer
from verifier_svc.backends.onnx_step_graph import export_step_graph, io_names
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings

VARIANTS = {"8 bits, blocks of 32 (built)": (8, 32, None), "8 bits, blocks of 64": (8, 64, None), "8 bits, blocks of 128": (8, 128, None),
            "4 bits, blocks of 32, head 8 bits": (4, 32, 8), "4 bits, blocks of 16, head 8 bits": (4, 16, 8),
            # Added in the evening's run (2026-11-28, an AMD EPYC), which ran only it beside the built one.
            "8 bits, head 4 bits in blocks of 32": (8, 32, 4)}
CONTEXT = 256


def quantized(source: Path, out: Path, bits: int, block: int, head_bits: int | None) -> Path:
    model = onnx.load(str(source))
    weights = {i.name: i for i in model.graph.initializer}
    head = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights and weights[n.input[1]].dims[-1] > 10_000]
    first = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=True, accuracy_level=4, nodes_to_exclude=head if head_bits else [])
    first.process()
    model = first.model.model
    if head_bits:
        second = MatMulNBitsQuantizer(model, bits=head_bits, block_size=32, is_symmetric=True, accuracy_level=4)
        second.process()
        model = second.model.model
    onnx.save(model, str(out))
    return out


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    inputs, _ = io_names(target.model.config.num_hidden_layers)
    tokenizer = Tokenizer(tokenizer_dir("default"))
    questions = load_bench_questions()[::40]
    work = Path(tempfile.mkdtemp())
    with torch.no_grad():
        source = export_step_graph(target.model, work / "float.onnx")
    sessions = {"float32": ort.InferenceSession(str(source), session_options(2), providers=["CPUExecutionProvider"])}
    for i, (name, spec) in enumerate(VARIANTS.items()):
        sessions[name] = ort.InferenceSession(str(quantized(source, work / f"{i}.onnx", *spec)), session_options(2), providers=["CPUExecutionProvider"])
    alpha: dict[str, list[float]] = {name: [] for name in VARIANTS}
    agree: dict[str, list[bool]] = {name: [] for name in VARIANTS}
    for question in questions:
        ids = tokenizer.encode(question["turns"][0])[:96]
        n = len(ids)
        feed = {"input_ids": np.array([ids]), "position_ids": np.arange(n)[None], "logits_index": np.arange(n),
                "attention_bias": np.where(np.tri(n, n, 0, bool), 0, np.finfo(np.float32).min).astype(np.float32)[None, None],
                **{name: np.zeros((1, 3, 0, 64), np.float32) for name in inputs[4:]}}
        p = softmax(sessions["float32"].run(["logits"], feed)[0][0])
        for name in VARIANTS:
            q = softmax(sessions[name].run(["logits"], feed)[0][0])
            alpha[name] += list(np.minimum(p, q).sum(-1))
            agree[name] += list(p.argmax(-1) == q.argmax(-1))
    capacity = CONTEXT + CONTEXT // 4
    bias = np.full((1, 1, 1, capacity + 1), np.finfo(np.float32).min, np.float32)
    bias[..., :CONTEXT] = bias[..., capacity:] = 0
    step = {"input_ids": np.array([[5000]]), "position_ids": np.array([[CONTEXT]]), "logits_index": np.array([0]), "attention_bias": bias,
            **{name: np.random.randn(1, 3, capacity, 64).astype(np.float32) for name in inputs[4:]}}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for turn in range(12):
        for name in list(VARIANTS) if turn % 2 == 0 else list(VARIANTS)[::-1]:
            for _ in range(3):
                sessions[name].run(None, step)
            for _ in range(10):
                began = time.perf_counter()
                sessions[name].run(None, step)
                times[name].append(time.perf_counter() - began)
    print(f"{len(next(iter(alpha.values())))} positions of {len(questions)} prompts")
    for name in VARIANTS:
        print(f"{name}: alpha (T=1) {np.mean(alpha[name]):.3f}, argmax agreement {np.mean(agree[name]):.3f}, step {1000 * statistics.median(times[name]):.2f} ms")


if __name__ == "__main__":
    main()

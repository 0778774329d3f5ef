"""Probe (2026-11-28): one-token passes of the default model after 256 cached tokens, float32,
four systems in one process, blocks of 10 timed calls (after 3 untimed) taking turns:
onnxruntime over the exported step (verifier_svc/backends/onnx_step_graph.py) with its threads
parked between nodes and spinning, torch's eager pass as served without onnxruntime passes
(TargetModel.score as the start-up timing left it), and llama.cpp's F32 decoding of one token (llama-cpp-python, same threads).

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/onnx_step_probe.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from bench.engine import prefilled, read_bandwidth
from bench.llama_cpp_peers import retyped_gguf
from specdec.model_files import default_gguf
from verifier_svc.backends.onnx_step_graph import export_step_graph, io_names
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.token_tree import chain

CONTEXT = 256


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    backend = target.backend
    print(f"served torch pass: weight first {backend.weight_first}, one-row copies {backend.one_row}; read {read_bandwidth('cpu') / 1e9:.1f} GB/s")
    cache = prefilled(target, 1, CONTEXT)[0]
    inputs, _ = io_names(target.model.config.num_hidden_layers)
    sessions = {}
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        path = export_step_graph(target.model, Path(folder) / "step.onnx")
        for spinning in ("0", "1"):
            options = ort.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
            sessions[spinning] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    buffers = [t.contiguous().numpy() for layer in cache.cache.layers for t in (layer.keys, layer.values)]
    feed = {"input_ids": np.array([[5000]]), "position_ids": np.array([[CONTEXT]]), "attention_bias": np.zeros((1, 1, 1, CONTEXT + 1), np.float32),
            "logits_index": np.array([0]), **dict(zip(inputs[4:], buffers))}

    import llama_cpp

    llm = llama_cpp.Llama(str(retyped_gguf(default_gguf(), "float32")), n_ctx=1024, n_threads=torch.get_num_threads(), verbose=False)
    llm.eval([1000 + i for i in range(CONTEXT)])

    def llama_one() -> None:
        llm.eval([5000])
        llm.n_tokens -= 1

    def torch_one() -> torch.Tensor:
        logits = target.score(cache, [5000], chain([]))
        cache.truncate(CONTEXT)
        return logits

    ours = torch_one()[0].numpy()
    theirs = sessions["0"].run(None, feed)[0][0, 0]
    print(f"onnxruntime against torch: max logit difference {np.abs(ours - theirs).max():.2g}, same argmax {ours.argmax() == theirs.argmax()}")
    systems = {"onnxruntime, threads parked": lambda: sessions["0"].run(None, feed), "onnxruntime, threads spinning": lambda: sessions["1"].run(None, feed),
               "torch, served": torch_one, "llama.cpp F32": llama_one}
    times: dict[str, list[float]] = {name: [] for name in systems}
    for turn in range(8):
        for name in list(systems) if turn % 2 == 0 else list(systems)[::-1]:
            for _ in range(3):
                systems[name]()
            for _ in range(10):
                began = time.perf_counter()
                systems[name]()
                times[name].append(time.perf_counter() - began)
    for name, seconds in times.items():
        print(f"{name}: median {1000 * statistics.median(seconds):.1f} ms, min {1000 * min(seconds):.1f}")


if __name__ == "__main__":
    main()

"""Probe (2026-11-28): the verifier's onnxruntime step with its attention as one
GroupQueryAttention node over the session's buffers (this checkout) against the step with the
attention written out (exported by commit 562e2f1's verifier_svc/backends/onnx_step_graph.py
into OLD_STEP), one-token and 8-token passes after 256, 1,024 and 2,000 cached tokens, blocks of
10 calls alternated; then prompts' prefills through the fused step (from an empty cache) against
torch's as served, alternated.

    git worktree add /tmp/old 562e2f1 && (cd /tmp/old && python -c "...export_step_graph(model, OLD_STEP)")
    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/onnx_fused_attention_probe.py OLD_STEP
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from specdec.onnx_threads import session_options
from verifier_svc.backends.onnx_step_graph import export_step_graph
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.token_tree import chain, tree_attention_mask, tree_position_ids

HIDDEN = np.finfo(np.float32).min


def time_block(fn, samples: list[float]) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2):
        fn()
    for _ in range(10):
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", tune_pass_sizes=False))
    layers = target.model.config.num_hidden_layers
    with tempfile.TemporaryDirectory() as work:
        new = ort.InferenceSession(str(export_step_graph(target.model, Path(work) / "step.onnx")), session_options(2), providers=["CPUExecutionProvider"])
        old = ort.InferenceSession(sys.argv[1], session_options(2), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for start in (256, 1024, 2000):
            capacity = start + start // 4 + 64
            cache = [(rng.standard_normal((1, 3, capacity, 64)) * 0.5).astype(np.float32) for _ in range(2 * layers)]
            for n in (1, 8):
                ids = [int(t) for t in rng.integers(100, 40000, n)]
                causal = np.where(np.tril(np.ones((n, n))) > 0, 0, HIDDEN)
                old_bias = np.full((1, 1, n, capacity + n), HIDDEN, np.float32)
                old_bias[..., :start], old_bias[0, 0, :, capacity:] = 0, causal
                feeds = {"input_ids": np.array([ids]), "position_ids": np.arange(start, start + n)[None], "attention_bias": old_bias,
                         "logits_index": np.arange(n)}
                feeds.update({f"cache_{kind}.{i}": cache[2 * i + j] for i in range(layers) for j, kind in enumerate(("key", "value"))})
                buffers = [c.copy() for c in cache]
                bias = np.zeros((1, 1, n, start + n), np.float32)
                bias[0, 0, :, start:] = causal
                binding = new.io_binding()
                for name, value in (("input_ids", np.array([ids])), ("position_ids", np.arange(start, start + n)[None]), ("attention_bias", bias),
                                    ("logits_index", np.arange(n)), ("seqlens_k", np.array([start + n - 1], np.int32)),
                                    ("total_length", np.array(start + n, np.int32))):
                    binding.bind_cpu_input(name, value)
                for i in range(layers):
                    for j, kind in enumerate(("key", "value")):
                        buffer = buffers[2 * i + j]
                        binding.bind_input(f"cache_{kind}.{i}", "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
                        binding.bind_output(f"present_{kind}.{i}", "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
                binding.bind_output("logits", "cpu")
                times: dict[str, list[float]] = {"written out": [], "fused": []}
                for block in range(4):
                    for name in (("written out", "fused") if block % 2 == 0 else ("fused", "written out")):
                        time_block((lambda: old.run(None, feeds)) if name == "written out" else (lambda: new.run_with_iobinding(binding)), times[name])
                print(f"{start} cached, {n} new: " + ", ".join(f"{k} {statistics.median(v) * 1e3:.1f} ms" for k, v in times.items()))
    backend = target.backend
    for n in (32, 128, 400):
        ids = [int(t) for t in rng.integers(100, 40000, n)]

        def torch_prefill() -> torch.Tensor:
            with backend._passes_in_torch():
                return target.score(target.new_cache(), ids, chain([]))

        def onnx_prefill() -> torch.Tensor:
            tree = chain([])
            with torch.inference_mode():
                return backend.onnx.score(target.new_cache(), ids, tree_position_ids(tree, 0, n), tree_attention_mask(tree, 0, n), 0, n - 1)

        difference = (torch_prefill() - onnx_prefill()).abs().max().item()
        times = {"torch": [], "fused": []}
        for block in range(4):
            for name in (("torch", "fused") if block % 2 == 0 else ("fused", "torch")):
                for _ in range(3):
                    began = time.perf_counter()
                    (torch_prefill if name == "torch" else onnx_prefill)()
                    times[name].append(time.perf_counter() - began)
        print(f"prefill of {n}: " + ", ".join(f"{k} {statistics.median(v) * 1e3:.0f} ms" for k, v in times.items()) + f"; logits {difference:.1e} apart")


if __name__ == "__main__":
    main()

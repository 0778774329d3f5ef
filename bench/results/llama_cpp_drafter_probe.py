"""Probe (2026-11-29): llama.cpp (llama-cpp-python) as the model drafter's engine, against the
built int8 drafter (onnxruntime, MatMulNBits 8 bits in blocks of 32). For each, over Spec-Bench
prompts (the first 96 tokens of every 40th), alpha at T=1 (sum_x min(p, q), p the float32
target's distribution) and argmax agreement at every position, and the one-token step after 256
cached tokens (logits to numpy included; blocks of 10 calls in turns, 2 threads). llama-cpp-python
0.3.16 (the peers' optional extra), its files re-typed as bench/llama_cpp_peers.py does.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/llama_cpp_drafter_probe.py
"""

from __future__ import annotations

import glob
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench.llama_cpp_peers import retyped_gguf
from bench.prompts import load_bench_questions
from drafter_svc.draft_cache import DraftCache
from drafter_svc.draft_model import DraftModel
from drafter_build.onnx_contract import causal_bias
from specdec.model_files import default_gguf, tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings

CONTEXT = 256
LLAMA_TYPES = {"llama.cpp Q4_1 (the shipped GGUF)": None, "llama.cpp Q8_0": "int8", "llama.cpp F16": "float16"}


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class LlamaStep:
    def __init__(self, path: Path) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=1024, n_threads=2, n_threads_batch=2, logits_all=True, verbose=False)

    def logits(self, ids: list[int]) -> np.ndarray:
        self.llm.n_tokens = 0
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)])

    def step(self, token: int, past: int) -> np.ndarray:
        self.llm.n_tokens = past
        self.llm.eval([token])
        return np.array(self.llm.scores[past])


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    tokenizer = Tokenizer(tokenizer_dir("default"))
    questions = load_bench_questions()[::40]
    drafter = DraftModel(Path(glob.glob(str(Path.home() / ".cache/specdec/drafters/*/quantized"))[0]), threads=2)
    llamas = {name: LlamaStep(retyped_gguf(default_gguf(), dtype) if dtype else default_gguf()) for name, dtype in LLAMA_TYPES.items()}
    names = ["onnxruntime int8 (built)", *llamas]
    alpha: dict[str, list[float]] = {name: [] for name in names}
    agree: dict[str, list[bool]] = {name: [] for name in names}
    for question in questions:
        ids = tokenizer.encode(question["turns"][0])[:96]
        n = len(ids)
        with torch.no_grad():
            p = softmax(target.model(torch.tensor([ids])).logits[0].float().numpy())
        qs = {names[0]: drafter.run(ids, list(range(n)), causal_bias(0, n)[0, 0].numpy(), drafter.empty_cache())}
        qs.update({name: llm.logits(ids) for name, llm in llamas.items()})
        for name, logits in qs.items():
            q = softmax(logits.reshape(n, -1))
            alpha[name] += list(np.minimum(p, q).sum(-1))
            agree[name] += list(p.argmax(-1) == q.argmax(-1))
    context = tokenizer.encode(" ".join(q["turns"][0] for q in load_bench_questions()[:40]))[:CONTEXT]
    cache = drafter.empty_cache()
    drafter.run(context, list(range(CONTEXT)), causal_bias(0, CONTEXT)[0, 0].numpy(), cache)
    for llm in llamas.values():
        llm.logits(context)

    def onnx_step() -> None:
        drafter.run([5000], [CONTEXT], np.zeros((1, CONTEXT + 1), np.float32), cache, last_only=True)
        cache.truncate(CONTEXT)

    steps = {names[0]: onnx_step, **{name: (lambda llm=llm: llm.step(5000, CONTEXT)) for name, llm in llamas.items()}}
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(12):
        for name in names if turn % 2 == 0 else names[::-1]:
            for _ in range(3):
                steps[name]()
            for _ in range(10):
                began = time.perf_counter()
                steps[name]()
                times[name].append(time.perf_counter() - began)
    print(f"{len(alpha[names[0]])} positions of {len(questions)} prompts")
    for name in names:
        print(f"{name}: alpha (T=1) {np.mean(alpha[name]):.3f}, argmax agreement {np.mean(agree[name]):.3f}, "
              f"step {1000 * statistics.median(times[name]):.2f} ms (min {1000 * min(times[name]):.2f})")


if __name__ == "__main__":
    main()

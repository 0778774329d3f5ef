"""Probe (2026-11-28): the int8 model drafter built on the Llama graph version 2 (the attention
written out over a concatenated cache) against version 3 (one fused GroupQueryAttention node a
layer over buffers written in place), each run as the drafter service runs it
(drafter_svc/draft_model.py: a call for the prompt, then one call a token).

- Agreement with the float32 target: over Spec-Bench prompts (the first 96 tokens of every 20th)
  and the target's greedy continuation of 48 tokens (transformers, float32), at every position
  of the continuation alpha at T=1 (sum_x min(p, q)) and whether the argmaxes agree.
- One-token calls after 64 / 256 / 1,024 cached tokens, blocks of 10 calls in turns, threads as
  the drafter runs them (2).

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/drafter_in_place_probe.py OLD_FOLDER NEW_FOLDER
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.drafter_calls import rewound
from bench.prompts import load_bench_questions
from drafter_svc.draft_model import DraftModel, causal_bias
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings

CONTINUATION = 48
CACHED = (64, 256, 1024)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def drafted_logits(model: DraftModel, sequence: list[int], prompt: int) -> np.ndarray:
    """[len(sequence) - prompt + 1, vocab]: the prompt in one call, then one call a token."""
    cache = model.empty_cache()
    rows = [model.run(sequence[:prompt], range(prompt), causal_bias(0, prompt), cache, last_only=True)[0]]
    for position in range(prompt, len(sequence)):
        rows.append(model.run([sequence[position]], [position], causal_bias(position, 1), cache)[0])
    return np.stack(rows)


def main(folders: list[Path]) -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    tokenizer = Tokenizer(tokenizer_dir("default"))
    models = {str(folder): DraftModel(folder, threads=2) for folder in folders}
    alpha: dict[str, list[float]] = {name: [] for name in models}
    agree: dict[str, list[bool]] = {name: [] for name in models}
    questions = load_bench_questions()[::20]
    for question in questions:
        ids = tokenizer.encode(question["turns"][0])[:96]
        with torch.no_grad():
            sequence = target.model.generate(torch.tensor([ids]), max_new_tokens=CONTINUATION, do_sample=False)[0].tolist()
            p = softmax(target.model(torch.tensor([sequence])).logits[0, len(ids) - 1 : -1].float().numpy())
        for name, model in models.items():
            q = softmax(drafted_logits(model, sequence, len(ids))[:-1])
            alpha[name] += list(np.minimum(p, q).sum(-1))
            agree[name] += list(p.argmax(-1) == q.argmax(-1))
    times: dict[tuple[str, int], list[float]] = {(name, n): [] for name in models for n in CACHED}
    rng = np.random.default_rng(0)
    for cached in CACHED:
        ids = [int(t) for t in rng.integers(100, 40_000, cached + 1)]
        caches = {name: model.empty_cache() for name, model in models.items()}
        for name, model in models.items():
            model.run(ids[:cached], range(cached), causal_bias(0, cached), caches[name], last_only=True)
        for turn in range(12):
            for name in list(models) if turn % 2 == 0 else list(models)[::-1]:
                model = models[name]
                for i in range(13):
                    cache = rewound(model, caches[name], cached)
                    began = time.perf_counter()
                    model.run([ids[cached]], [cached], causal_bias(cached, 1), cache)
                    if i >= 3:
                        times[(name, cached)].append(time.perf_counter() - began)
    print(f"{len(next(iter(alpha.values())))} positions of {len(questions)} prompts, {CONTINUATION}-token greedy continuations")
    for name, model in models.items():
        steps = ", ".join(f"{1000 * statistics.median(times[(name, n)]):.2f}" for n in CACHED)
        print(f"{name} ({model.manifest.cache}): alpha (T=1) {np.mean(alpha[name]):.3f}, argmax agreement {np.mean(agree[name]):.3f}, "
              f"one-token call after {' / '.join(map(str, CACHED))} cached: {steps} ms")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])

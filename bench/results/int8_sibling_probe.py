"""Probe (2026-12-02): where does the int8 drafter's greedy choice differ from the float32
target's, and would its second choice have been right? Teacher-forced over the target's own
greedy answers (transformers' generate(), 64 tokens) to 32 Spec-Bench prompts (MT-bench, QA,
math, translation; chat template), the drafter (`specdec draft build quantized`) reading prompt
and answer in one call; positions bucketed by the drafter's probability of its own top token.
Asked: would siblings at the drafter's doubtful positions (its runner-up as a second node at
that depth, no extra drafting step) pay at temperature 0?

    PYTHONPATH=. SPECDEC_BENCH_DIR=../shared/bench flock -x /tmp/specdec-cpu.lock python bench/results/int8_sibling_probe.py
Output: bench/results/int8_sibling_probe-20261202.txt (docs/design/trees-vs-chains.md)."""
import glob
from pathlib import Path

import numpy as np
import torch

from bench.prompts import load_bench_questions, select
from drafter_build.onnx_contract import causal_bias
from drafter_svc.draft_model import DraftModel
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    tokenizer = Tokenizer(tokenizer_dir("default"))
    drafter = DraftModel(Path(glob.glob(str(Path.home() / ".cache/specdec/drafters/*/quantized"))[0]), threads=2)
    rows = []
    for prompt in select(load_bench_questions(), ["mt_bench", "qa", "math_reasoning", "translation"], 8):
        ids_in = tokenizer.encode_chat(prompt.messages)
        with torch.no_grad():
            ids = target.model.generate(torch.tensor([ids_in]), max_new_tokens=64, do_sample=False)[0].tolist()
        n = len(ids)
        logits = drafter.run(ids, list(range(n)), causal_bias(0, n)[0, 0].numpy(), drafter.empty_cache()).reshape(n, -1)
        logits = logits[len(ids_in) - 1 : -1]
        answer = np.array(ids[len(ids_in):])
        q = softmax(logits.astype(np.float64))
        top = np.argsort(-logits, -1)[:, :2]
        rows += [(q[i, top[i, 0]], top[i, 0] == answer[i], top[i, 1] == answer[i]) for i in range(len(answer))]
    r = np.array(rows, dtype=np.float64)
    misses = 1 - r[:, 1]
    print(f"{len(r)} answer positions: the drafter's top token is the target's {r[:, 1].mean():.3f} of the time; "
          f"its runner-up is, at {r[:, 2].sum():.0f} of the {misses.sum():.0f} others")
    print("\n| drafter's probability of its top token | share of positions | top token right | misses | runner-up right at |")
    print("|---|---|---|---|---|")
    for lo, hi in [(0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 0.99), (0.99, 1.01)]:
        m = (r[:, 0] >= lo) & (r[:, 0] < hi)
        print(f"| [{lo:.2f}, {min(hi, 1):.2f}{']' if hi > 1 else ')'} | {m.mean():.3f} | {r[m, 1].mean() if m.any() else 0:.3f} "
              f"| {misses[m].sum():.0f} | {r[m, 2].sum():.0f} |")


if __name__ == "__main__":
    main()

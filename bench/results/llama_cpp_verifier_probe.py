"""Probe (2026-11-29): llama.cpp (llama-cpp-python) as the verifier's engine, the question issue 40
asks before adopting one: do its logits depend on the pass's shape, so that greedy speculation
drifts from its own plain decoding near ties (llama.cpp issue 25618)? For F32 and BF16 files of
the default target (re-typed as bench/llama_cpp_peers.py does), over 12 Spec-Bench prompts:

- plain greedy decoding, a token a call, 64 tokens: the reference;
- the same text verified in rounds, as our verifier does: the pending token and the next k tokens
  of the reference (a drafter always right) or k tokens with the last one wrong, in one call;
  the longest prefix whose argmax matches, then the argmax after it; k cycling through 1..8.
  Every output must equal the reference where the logits do not depend on the call's shape;
- the largest |logit| difference between a position's logits in its round's call and in the
  reference's one-token call, where the two read the same tokens;
- the pass cost: t(n) for n = 1, 2, 4, 8 new tokens after 256 cached ones (logits of every row,
  to numpy), the two files in turns, medians of 30.

    SPECDEC_BENCH_DIR=../shared/bench PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/llama_cpp_verifier_probe.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from bench.llama_cpp_peers import retyped_gguf
from bench.prompts import load_bench_questions
from specdec.model_files import default_gguf, tokenizer_dir
from specdec.tokenizer import Tokenizer

TYPES = {"F32": "float32", "BF16": "bfloat16"}
NEW = 64
CONTEXT = 256


class Engine:
    def __init__(self, dtype: str) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(retyped_gguf(default_gguf(), dtype)), n_ctx=1024, n_threads=2, n_threads_batch=2,
                         logits_all=True, verbose=False)

    def run(self, past: int, ids: list[int]) -> np.ndarray:
        """Logits [len(ids), vocab] of `ids` after the first `past` cached tokens (the rest dropped)."""
        self.llm.n_tokens = past
        self.llm.eval(ids)
        return np.array(self.llm.scores[past : past + len(ids)])


def plain(engine: Engine, prompt: list[int]) -> tuple[list[int], list[np.ndarray]]:
    logits = [engine.run(0, prompt)[-1]]
    out: list[int] = []
    for _ in range(NEW):
        out.append(int(logits[-1].argmax()))
        logits.append(engine.run(len(prompt) + len(out) - 1, [out[-1]])[0])
    return out, logits


def verified(engine: Engine, prompt: list[int], reference: list[int], ref_logits: list[np.ndarray], wrong_last: bool) -> tuple[list[int], float]:
    """Greedy output verified in rounds (module docstring), and the largest logit difference from
    the reference's one-token calls at positions whose context matched."""
    out = [int(engine.run(0, prompt)[-1].argmax())]
    worst, k = 0.0, 0
    while len(out) < NEW:
        k = k % 8 + 1
        drafts = reference[len(out) : len(out) + k]
        if wrong_last and drafts:
            drafts[-1] = (drafts[-1] + 1) % 49152
        logits = engine.run(len(prompt) + len(out) - 1, [out[-1], *drafts])
        if out == reference[: len(out)]:
            rows = [i for i in range(len(drafts) + 1) if drafts[:i] == reference[len(out) : len(out) + i]]
            worst = max(worst, *(float(np.abs(logits[i] - ref_logits[len(out) + i]).max()) for i in rows))
        choice = logits.argmax(-1)
        accepted = 0
        while accepted < len(drafts) and int(choice[accepted]) == drafts[accepted]:
            accepted += 1
        out += [*drafts[:accepted], int(choice[accepted])]
    return out[:NEW], worst


def main() -> None:
    tokenizer = Tokenizer(tokenizer_dir("default"))
    prompts = [tokenizer.encode(q["turns"][0])[:200] for q in load_bench_questions()[::40]]
    engines = {name: Engine(dtype) for name, dtype in TYPES.items()}
    for name, engine in engines.items():
        differ = {False: 0, True: 0}
        first: dict[bool, list[int]] = {False: [], True: []}
        worst = 0.0
        for prompt in prompts:
            reference, ref_logits = plain(engine, prompt)
            for wrong_last in (False, True):
                out, diff = verified(engine, prompt, reference, ref_logits, wrong_last)
                worst = max(worst, diff)
                if out != reference:
                    differ[wrong_last] += 1
                    first[wrong_last].append(next(i for i, (a, b) in enumerate(zip(out, reference)) if a != b))
        print(f"{name}: of {len(prompts)} prompts' {NEW}-token greedy outputs verified in rounds of 1-8 drafts, "
              f"{differ[False]} differ from plain decoding with drafts always right (first at {first[False]}), "
              f"{differ[True]} with each round's last draft wrong (first at {first[True]}); "
              f"largest logit difference from the one-token calls {worst:.2e}", flush=True)
    context = tokenizer.encode(" ".join(q["turns"][0] for q in load_bench_questions()[:40]))[:CONTEXT]
    for engine in engines.values():
        engine.run(0, context)
    sizes = (1, 2, 4, 8)
    times: dict[tuple[str, int], list[float]] = {(name, n): [] for name in engines for n in sizes}
    names = list(engines)
    for turn in range(6):
        for name in names if turn % 2 == 0 else names[::-1]:
            for n in sizes:
                for i in range(7):
                    began = time.perf_counter()
                    engines[name].run(CONTEXT, [5000 + j for j in range(n)])
                    if i >= 2:
                        times[name, n].append(time.perf_counter() - began)
    for name in names:
        t1 = statistics.median(times[name, 1])
        curve = ", ".join(f"t({n})/t(1) {statistics.median(times[name, n]) / t1:.2f}" for n in sizes[1:])
        print(f"{name}: t(1) {1000 * t1:.2f} ms (min {1000 * min(times[name, 1]):.2f}), {curve}")


if __name__ == "__main__":
    main()

"""Probe (2026-11-29): the int8 model drafter with its output head cut to the K likeliest tokens
(FR-Spec's idea: the drafter's q is then 0 outside them, so exactness is untouched; the head is a
fifth of a drafted step). Rankings: token id (BPE merge order) and frequency over a calibration
text (GSM8K reference answers, HumanEval solutions, beside the Spec-Bench prompts: not the prompts measured). Over the target's
own greedy answers (64 tokens) to every 40th Spec-Bench prompt: alpha at T=1 (sum_x min(p, q),
q the subset's softmax) and argmax agreement at every answer position; and the one-token step
after 256 cached tokens, the head's MatMulNBits sliced to K rows (blocks of 10 calls in turns).

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/head_subset_probe.py
"""

from __future__ import annotations

import collections
import glob
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from bench.prompts import bench_dir, load_bench_questions
from drafter_build.onnx_contract import causal_bias
from drafter_svc.draft_model import DraftModel
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings

SIZES = (8192, 16384, 24576, 32768)
CONTEXT = 256


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def frequency_ranking(tokenizer: Tokenizer, vocab: int) -> np.ndarray:
    texts = [json.loads(line)["answer"] for line in open(bench_dir() / "gsm8k_test.jsonl")]
    texts += [json.loads(line).get("canonical_solution", "") for line in open(bench_dir() / "humaneval.jsonl")]
    counts = collections.Counter(t for text in texts for t in tokenizer.encode(text))
    score = np.zeros(vocab)
    for token, count in counts.items():
        score[token] = count
    score[:256] += 1e9  # specials and bytes always in
    return np.lexsort((np.arange(vocab), -score))  # ties: lower id first


def sliced(folder: Path, keep: np.ndarray, out: Path) -> Path:
    model = onnx.load(str(folder / "model.onnx"))
    inits = {i.name: i for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "MatMulNBits" and n.name.startswith("/lm_head"))
    for name in node.input[1:]:
        array = onnx.numpy_helper.to_array(inits[name])
        inits[name].CopyFrom(onnx.numpy_helper.from_array(np.ascontiguousarray(array[np.sort(keep)]), name))
    for attribute in node.attribute:
        if attribute.name == "N":
            attribute.i = len(keep)
    out.mkdir()
    onnx.save(model, str(out / "model.onnx"))
    (out / "manifest.json").write_text((folder / "manifest.json").read_text())
    return out


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32", cpu_onnx_passes=False))
    tokenizer = Tokenizer(tokenizer_dir("default"))
    folder = Path(glob.glob(str(Path.home() / ".cache/specdec/drafters/*/quantized"))[0])
    drafter = DraftModel(folder, threads=2)
    vocab = drafter.manifest.vocab_size
    rankings = {"id": np.arange(vocab), "frequency": frequency_ranking(tokenizer, vocab)}
    alpha = collections.defaultdict(list)
    agree = collections.defaultdict(list)
    covered = collections.defaultdict(list)
    for question in load_bench_questions()[::40]:
        prompt = tokenizer.encode(question["turns"][0])[:96]
        with torch.no_grad():
            ids = target.model.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False)[0].tolist()
            p = softmax(target.model(torch.tensor([ids])).logits[0].float().numpy())[len(prompt) - 1 : -1]
        n = len(ids)
        logits = drafter.run(ids, list(range(n)), causal_bias(0, n)[0, 0].numpy(), drafter.empty_cache()).reshape(n, -1)[len(prompt) - 1 : -1]
        answer = np.array(ids[len(prompt):])
        for rank_name, ranking in rankings.items():
            for size in (vocab, *SIZES):
                mask = np.full(vocab, -np.inf)
                mask[ranking[:size]] = 0
                q = softmax(logits + mask)
                key = (rank_name, size)
                alpha[key] += list(np.minimum(p, q).sum(-1))
                agree[key] += list(p.argmax(-1) == q.argmax(-1))
                covered[key] += list(np.isin(answer, ranking[:size]))
    print(f"{len(alpha[('id', vocab)])} answer positions")
    for key in alpha:
        print(f"{key[0]} top {key[1]}: alpha (T=1) {np.mean(alpha[key]):.3f}, argmax agreement {np.mean(agree[key]):.3f}, greedy tokens in the subset {np.mean(covered[key]):.3f}")
    work = Path(tempfile.mkdtemp())
    models = {"full head": drafter, **{f"frequency top {k}": DraftModel(sliced(folder, rankings["frequency"][:k], work / str(k)), threads=2) for k in SIZES}}
    context = tokenizer.encode(" ".join(q["turns"][0] for q in load_bench_questions()[:40]))[:CONTEXT]
    caches = {}
    for name, model in models.items():
        caches[name] = model.empty_cache()
        model.run(context, list(range(CONTEXT)), causal_bias(0, CONTEXT)[0, 0].numpy(), caches[name])

    def step(name: str) -> None:
        models[name].run([5000], [CONTEXT], np.zeros((1, CONTEXT + 1), np.float32), caches[name], last_only=True)
        caches[name].truncate(CONTEXT)

    names = list(models)
    times = collections.defaultdict(list)
    for turn in range(12):
        for name in names if turn % 2 == 0 else names[::-1]:
            for _ in range(3):
                step(name)
            for _ in range(10):
                began = time.perf_counter()
                step(name)
                times[name].append(time.perf_counter() - began)
    for name in names:
        print(f"{name}: step {1000 * statistics.median(times[name]):.2f} ms (min {1000 * min(times[name]):.2f})")


if __name__ == "__main__":
    main()

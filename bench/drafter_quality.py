"""`specdec bench-drafter`: c and alpha of each ONNX drafter against the target, per bench
category, with Leviathan et al.'s predicted speedup.

- alpha (Leviathan et al., section 3.1: the expected acceptance rate, E[sum_x min(p(x), q(x))]):
  over the positions of the target's own greedy continuation of each bench prompt, p the target's
  distribution (transformers, float32, standardized by verifier_svc.sampling) and q the drafter's
  (onnxruntime, draft_sampling: the q it really sends, tail-cut). At temperature 0 both are point
  masses: alpha is how often the argmaxes agree.
- c: the drafter's per-token cost over the target's, each a single-token decoding step on a KV
  cache holding the prompt, timed the same way (median over the continuation's steps; the
  target as the verifier runs it, transformers on torch with the verifier's CPU linear layout;
  the drafter as the drafter service runs it, onnxruntime).
- bytes of q per drafted token: the serialized SparseDistribution the drafter sends.
- predicted speedup at draft length g: (1 - alpha^(g+1)) / ((1 - alpha)(g c + 1)) (their eq. 1
  over their section 3.4's cost model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench.machine import describe
from bench.prompts import TASKS, add_prompts_flag, load_bench_questions, select
from drafter_svc.draft_model import DraftModel, causal_bias
from drafter_svc.draft_sampling import TAIL_MASS, draft_distribution
from drafter_svc.drafter_names import MODEL_DRAFTERS
from specdec.model_files import drafter_dir, tokenizer_dir
from specdec.sampling_params import SamplingParams
from specdec.tokenizer import Tokenizer
from specdec.v1 import common_pb2

TEMPERATURES = (0.0, 1.0)
# The tail cut's trade at temperature 1: q loses at most the cut mass of alpha, and sheds bytes.
TAIL_MASSES = (1e-4, 1e-3, 1e-2)


def predicted_speedup(alpha: float, c: float, g: int) -> float:
    """Leviathan et al.'s expected walltime improvement for draft length g (their eq. 1 / (g c + 1))."""
    if alpha >= 1.0:
        return (g + 1) / (g * c + 1)
    return (1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + 1))


def alpha_at(p_logits: np.ndarray, q_logits: np.ndarray, params: SamplingParams, tail_mass: float = TAIL_MASS) -> tuple[float, float]:
    """(sum_x min(p, q), bytes of the q sent) at one position; p_logits, q_logits [vocab]."""
    import torch

    from verifier_svc.sampling import standardize

    q = draft_distribution(q_logits, params, tail_mass)
    size = common_pb2.SparseDistribution(token_ids=q.token_ids.tolist(), probs=q.probs.tolist()).ByteSize()
    if params.greedy:
        return float(int(np.argmax(p_logits)) == int(q.token_ids[0])), size
    p = standardize(torch.from_numpy(p_logits)[None], params)[0].double().numpy()
    return float(np.minimum(p[q.token_ids], q.probs).sum()), size


def measure(
    kinds: Sequence[str], questions: Sequence[dict], rows: Sequence[str], per_row: int, new_tokens: int,
    temperatures: Sequence[float],
) -> dict[str, object]:
    import torch

    from verifier_svc.model_loader import load_model, model_dir
    from verifier_svc.target_model import TargetModel

    tokenizer = Tokenizer(tokenizer_dir("default"))
    target = load_model(model_dir("default"), "cpu", torch.float32)
    as_verifier = TargetModel(target, "default")  # its CPU passes' linear layout (weight first, untuned)
    drafters = {kind: DraftModel(drafter_dir("default", kind)) for kind in kinds}
    prompts = select(questions, rows, per_row)
    results: dict[str, dict[str, dict[str, list[float]]]] = {k: {} for k in kinds}
    target_steps: list[float] = []
    draft_steps: dict[str, list[float]] = {k: [] for k in kinds}
    for n, prompt in enumerate(prompts):
        ids = tokenizer.encode_chat(prompt.messages)
        with torch.inference_mode():  # the target's greedy continuation, timing each cached step
            out = target(torch.tensor([ids]), use_cache=True)
            cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
            sequence = list(ids)
            for _ in range(new_tokens):
                sequence.append(token)
                started = time.perf_counter()
                with as_verifier.kernels():
                    out = target(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
                target_steps.append(time.perf_counter() - started)
                cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
            p_logits = target(torch.tensor([sequence])).logits[0, len(ids) - 1 :].float().numpy()  # [new + 1, vocab]
        for kind, model in drafters.items():
            q_logits = model.run(sequence, range(len(sequence)), causal_bias(0, len(sequence)), model.empty_cache())[len(ids) - 1 :]
            kv = model.empty_cache()
            model.run(ids, range(len(ids)), causal_bias(0, len(ids)), kv, last_only=True)
            for position, token in enumerate(sequence[len(ids) :], start=len(ids)):
                started = time.perf_counter()
                model.run([token], [position], causal_bias(position, 1), kv)
                draft_steps[kind].append(time.perf_counter() - started)
            for temperature in temperatures:
                params = SamplingParams(temperature)
                cells = results[kind].setdefault(f"{prompt.row}@{temperature:g}", {"alpha": [], "q_bytes": []})
                for row in range(len(q_logits)):
                    a, size = alpha_at(p_logits[row], q_logits[row], params)
                    cells["alpha"].append(a)
                    cells["q_bytes"].append(size)
                    if temperature == 1.0:
                        for tail in TAIL_MASSES:
                            cut = results[kind].setdefault(f"tail {tail:g}", {"alpha": [], "q_bytes": []})
                            a, size = alpha_at(p_logits[row], q_logits[row], params, tail)
                            cut["alpha"].append(a)
                            cut["q_bytes"].append(size)
        print(f"[{n + 1}/{len(prompts)}] {prompt.row} q{prompt.question_id}", file=sys.stderr, flush=True)
    target_step = statistics.median(target_steps)
    return {
        "target_step_seconds": target_step,
        "drafters": {
            kind: {
                "step_seconds": statistics.median(draft_steps[kind]),
                "c": statistics.median(draft_steps[kind]) / target_step,
                "cells": {key: {"alpha": float(np.mean(v["alpha"])), "q_bytes": float(np.mean(v["q_bytes"])), "positions": len(v["alpha"])}
                          for key, v in results[kind].items()},
            }
            for kind in kinds
        },
    }


def markdown(report: dict[str, object], rows: Sequence[str], temperatures: Sequence[float], g: int) -> str:
    lines = [
        f"target step {1000 * report['target_step_seconds']:.1f} ms (transformers, float32, one token on a cached prompt)", "",
        "| drafter | c | row | " + " | ".join(f"alpha T={t:g} | q bytes T={t:g} | predicted k{g} T={t:g}" for t in temperatures) + " |",
        "|---|---|---|" + "---|---|---|" * len(temperatures),
    ]
    for kind, d in report["drafters"].items():  # type: ignore[union-attr]
        for row in [*rows, "all"]:
            cells = []
            for t in temperatures:
                keys = [f"{r}@{t:g}" for r in rows] if row == "all" else [f"{row}@{t:g}"]
                alphas = [d["cells"][k]["alpha"] for k in keys if k in d["cells"]]
                sizes = [d["cells"][k]["q_bytes"] for k in keys if k in d["cells"]]
                alpha = float(np.mean(alphas))
                cells.append(f"{alpha:.3f} | {np.mean(sizes):.0f} | {predicted_speedup(alpha, d['c'], g):.2f}x")
            lines.append(f"| onnx-{kind} | {d['c']:.2f} | {row} | " + " | ".join(cells) + " |")
    lines += ["", f"Tail cut of q at temperature 1 (default {TAIL_MASS:g}), all rows:", "",
              "| drafter | tail mass | alpha | q bytes per drafted token |", "|---|---|---|---|"]
    for kind, d in report["drafters"].items():  # type: ignore[union-attr]
        for tail in TAIL_MASSES:
            cell = d["cells"][f"tail {tail:g}"]
            lines.append(f"| onnx-{kind} | {tail:g} | {cell['alpha']:.4f} | {cell['q_bytes']:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="specdec bench-drafter", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafters", default="quantized", help=f"comma-separated build kinds ({', '.join(MODEL_DRAFTERS.values())})")
    p.add_argument("--categories", default=",".join(TASKS), metavar="A,B", help="rows, as in specdec bench")
    p.add_argument("--per-category", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=48, help="positions per prompt (the target's greedy continuation)")
    p.add_argument("--draft-length", type=int, default=4, help="g of the predicted speedup")
    add_prompts_flag(p)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(list(argv))
    kinds = [k.strip() for k in args.drafters.split(",") if k.strip()]
    rows = [r.strip() for r in args.categories.split(",") if r.strip()]
    missing = [k for k in kinds if not (drafter_dir("default", k) / "manifest.json").is_file()]
    if missing:
        print(f"specdec bench-drafter: build first: {'; '.join(f'specdec draft build {k}' for k in missing)}", file=sys.stderr)
        return 2
    started = datetime.now(timezone.utc)
    report = measure(kinds, load_bench_questions(args.prompts), rows, args.per_category, args.new_tokens, TEMPERATURES)
    text = (f"# ONNX drafters: c and alpha against the target, {started:%Y-%m-%d %H:%M} UTC\n\n"
            f"{args.per_category} prompts per row, {args.new_tokens} positions each\n\n"
            f"{markdown(report, rows, TEMPERATURES, args.draft_length)}\n")
    print(text)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"drafter_quality-{stamp}.md").write_text(text, encoding="utf-8")
    payload = {"run": {**{k: str(v) for k, v in vars(args).items()}, "started": started.isoformat()}, "machine": describe(), **report}
    (args.out / f"drafter_quality-{stamp}.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Batched target passes timed two ways in one run: with transformers' `sdpa` and with the
verifier's CPU attention (verifier_svc/attention.py), or (`--compare layout`) with the linear
layers through F.linear and weight first (verifier_svc/linear_layout.py). B sessions with caches
of 400-1,000 tokens, one of them drafting d nodes (a chain), the others plain (B = 1: a lone
round's pass, unbatched and unpadded); median of
`--repeats` passes per shape, the two ways interleaved so that drift falls on both alike.

    flock /tmp/specdec-cpu.lock python -m bench.pass_times --batches 4 8 --drafts 0 1 2 4 8
    flock /tmp/specdec-cpu.lock python -m bench.pass_times --compare layout --batches 1 4 --drafts 0 1 3 7 15
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM

from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.kv_cache import KVCache
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[4, 8])
    p.add_argument("--drafts", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--compare", choices=["attention", "layout"], default="attention")
    return p.parse_args(argv)


def targets_to_compare(compare: str) -> dict[str, TargetModel]:
    """Two targets, the old way first: both differ only in what `compare` names."""
    folder = model_dir("default")
    if compare == "layout":
        model = load_model(folder, "cpu", torch.float32)
        through_f_linear, weight_first = TargetModel(model, "F.linear"), TargetModel(model, "weight first")
        through_f_linear.backend.weight_first = False
        return {"F.linear": through_f_linear, "weight first": weight_first}
    return {
        "sdpa": TargetModel(AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="sdpa").eval(), "sdpa"),
        "grouped": TargetModel(load_model(folder, "cpu", torch.float32), "grouped"),
    }


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    targets = targets_to_compare(args.compare)
    old_name, new_name = targets
    rng = random.Random(0)
    print(f"| B | drafted nodes d | {old_name} ms | {new_name} ms | {old_name} / {new_name} |")
    print("|---|---|---|---|---|")
    for batch in args.batches:
        prompts = [[rng.randrange(1000, 20000) for _ in range(400 + 200 * (b % 4))] for b in range(batch)]
        caches = {name: [KVCache(t.model.config) for _ in prompts] for name, t in targets.items()}
        for name, target in targets.items():
            for cache, prompt in zip(caches[name], prompts):
                target.score(cache, prompt, chain([]))
        for d in args.drafts:
            seconds: dict[str, list[float]] = {name: [] for name in targets}
            for _ in range(args.repeats + 1):  # the first of each shape is a warm-up
                for name, target in targets.items():
                    inputs = [PassInput(c, [5000], chain([6000 + j for j in range(d if b == 0 else 0)])) for b, c in enumerate(caches[name])]
                    started = time.perf_counter()
                    if len(inputs) == 1:  # as the verifier runs a lone round: unbatched
                        target.score(inputs[0].cache, inputs[0].pending, inputs[0].tree)
                    else:
                        score_batch(target, inputs)
                    seconds[name].append(time.perf_counter() - started)
                    for cache, prompt in zip(caches[name], prompts):
                        cache.truncate(len(prompt))
            old, new = (1000 * statistics.median(seconds[name][1:]) for name in (old_name, new_name))
            print(f"| {batch} | {d} | {old:.0f} | {new:.0f} | {old / new:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

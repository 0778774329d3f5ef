"""`score_batch` of this tree against `score_batch` of another git revision, in one run: B
sessions of the default model with caches of 256-1000 tokens (seeded), each pass adding T new
tokens to every session (one pending token, T - 1 drafted nodes in a chain), or with
`--drafting K` to the first K sessions only (the rest add their pending token: rounds of
uneven sizes, as copy drafts make them); the two implementations alternate pass by pass, on
the same caches (cut back after every pass), and each shape's median of `--repeats` passes is
reported with the before/after ratio.

    flock -x /tmp/specdec-cpu.lock env OPENBLAS_NUM_THREADS=1 python -m bench.batched_pass_ab --before main --batches 4 16 32 --new 1 4
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from verifier_svc import batched_pass
from verifier_svc.batched_pass import PassInput
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", default="main", help="the git revision whose verifier_svc/batched_pass.py is 'before'")
    p.add_argument("--batches", type=int, nargs="+", default=[4, 16])
    p.add_argument("--new", type=int, nargs="+", default=[1, 4], help="new tokens per session per pass")
    p.add_argument("--cached", type=int, nargs=2, default=[256, 1000], help="each cache's length is drawn from this range")
    p.add_argument("--drafting", type=int, default=None, help="only the first K sessions of a pass draft (default: all)")
    p.add_argument("--linear", action="store_true", help="torch's F.linear layout, unpadded (what start-up tuning chose on the 2-core Intel host), not weight first")
    p.add_argument("--repeats", type=int, default=7)
    return p.parse_args(argv)


def module_at(revision: str) -> Callable:
    """score_batch as verifier_svc/batched_pass.py and session_attention.py define it at
    `revision`, its attention function registered under a name of its own."""
    folder = Path(tempfile.mkdtemp())
    for name in ("session_attention", "batched_pass"):
        source = subprocess.run(["git", "show", f"{revision}:verifier_svc/{name}.py"], check=True, capture_output=True, text=True).stdout
        source = source.replace("from verifier_svc.session_attention import", "from session_attention_before import")
        source = source.replace('"specdec_session_attention"', '"specdec_session_attention_before"')
        path = folder / f"{name}_before.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"{name}_before", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses and the import above look modules up there
        spec.loader.exec_module(module)
    return module.score_batch


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    ways = {"before": module_at(args.before), "after": batched_pass.score_batch}
    target = TargetModel(load_model(model_dir("default"), "cpu", torch.float32), "default")
    if args.linear:
        target.backend.weight_first, target.backend.linear_min_rows = False, 1  # type: ignore[attr-defined]
    rng = random.Random(0)
    print(f"torch threads {torch.get_num_threads()}; before = {args.before}; drafting: {'all' if args.drafting is None else args.drafting} sessions")
    print("| B | new tokens T | cached tokens (mean) | before ms | after ms | before / after |")
    print("|---|---|---|---|---|---|")
    for batch in args.batches:
        prompts = [[rng.randrange(1000, 20000) for _ in range(rng.randrange(args.cached[0], args.cached[1] + 1))] for _ in range(batch)]
        caches = [target.new_cache() for _ in prompts]
        for cache, prompt in zip(caches, prompts):
            target.score(cache, prompt, chain([]))
        for new in args.new:
            seconds: dict[str, list[float]] = {name: [] for name in ways}
            for repeat in range(args.repeats + 1):  # the first of each shape is a warm-up
                order = list(ways) if repeat % 2 else list(reversed(ways))
                for name in order:
                    drafting = batch if args.drafting is None else args.drafting
                    inputs = [PassInput(c, [5000], chain([6000 + j for j in range(new - 1)] if b < drafting else [])) for b, c in enumerate(caches)]
                    started = time.perf_counter()
                    ways[name](target, inputs)
                    seconds[name].append(time.perf_counter() - started)
                    for cache, prompt in zip(caches, prompts):
                        cache.truncate(len(prompt))
            before, after = (1000 * statistics.median(seconds[name][1:]) for name in ways)
            mean = sum(map(len, prompts)) / batch
            print(f"| {batch} | {new} | {mean:.0f} | {before:.0f} | {after:.0f} | {before / after:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

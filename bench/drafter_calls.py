"""What the int8 drafter's model calls cost, as the drafter's pricing models them
(onnx_drafter.py: `step_seconds`, `catch_up_seconds`), in one run:

- one call of n tokens after a cache of 150 and of 300 tokens (a catch-up of n - 1 tokens plus
  the step's own), against one prefill token (a 128-token call's seconds per token);
- a sampled step's parts at temperature 1 with the exponential race: the model call, building q
  (draft_distribution) and the race's draw.

Median of `--repeats` calls each, of the built onnx-quantized drafter of the default target (or
of `--drafter DIR`). With `--against DIR` (another build of the same model: the generic graph
against the Llama graph, or an earlier graph version), the one-token call and the prefill
token of both builds instead, their calls interleaved so that contention hits both alike:

    specdec draft build quantized --graph generic --out /tmp/generic-quantized
    flock /tmp/specdec-cpu.lock python -m bench.drafter_calls --against /tmp/generic-quantized
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from drafter_svc.draft_cache import IN_PLACE, DraftCache
from drafter_svc.draft_model import DraftModel, causal_bias
from drafter_svc.draft_sampling import TAIL_MASS, draft_distribution
from drafter_svc.drafter_models import DrafterModels, load_built_model
from specdec.coupled_sampling import RaceNoise, race_ranking
from specdec.sampling_params import SamplingParams


def median_ms(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def cache_of(model: DraftModel, tokens: int, rng: np.random.Generator) -> DraftCache:
    ids = [int(t) for t in rng.integers(1000, 5000, tokens)]
    cache = model.empty_cache()
    model.run(ids, range(tokens), causal_bias(0, tokens), cache, last_only=True)
    return cache


def rewound(model: DraftModel, cache: DraftCache, length: int) -> DraftCache:
    """`cache` (made by `cache_of`, `length` entries) as a drafting call after those entries finds
    it: in place, cut back to them; concatenated, the arrays a call returned (exactly the
    entries: a cut view would be copied by onnxruntime, which drafting never makes it do)."""
    if model.manifest.cache == IN_PLACE:
        cache.truncate(length)
        return cache
    return DraftCache(list(cache.arrays), length)


def compare(models: dict[str, DraftModel], repeats: int, rng: np.random.Generator) -> None:
    """One-token calls after 150-1,500 cached tokens and a 128-token prefill's seconds per token,
    for each build, interleaved call by call."""
    names = list(models)
    print("| call | " + " | ".join(f"{name} ms" for name in names) + " | first / last |")
    print("|---|" + "---|" * (len(names) + 1))
    for start in (0, 150, 300, 800, 1500):
        n = 128 if start == 0 else 1
        ids = [int(t) for t in rng.integers(1000, 5000, n)]
        caches = {name: cache_of(model, start, rng) if start else model.empty_cache() for name, model in models.items()}
        times: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(repeats if n == 1 else 3):
            for name, model in models.items():
                started = time.perf_counter()
                model.run(ids, range(start, start + n), causal_bias(start, n), rewound(model, caches[name], start))
                times[name].append((time.perf_counter() - started) / n)
        ms = [1000 * statistics.median(times[name]) for name in names]
        label = "a prefill token (a 128-token call)" if start == 0 else f"1 token after {start} cached"
        print(f"| {label} | " + " | ".join(f"{m:.2f}" for m in ms) + f" | {ms[0] / ms[-1]:.2f} |")


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--drafter", type=Path, default=None, metavar="DIR", help="the build to time (default: the built onnx-quantized drafter)")
    p.add_argument("--against", type=Path, default=None, metavar="DIR", help="another build of the drafter to compare with")
    args = p.parse_args(argv)
    model = DraftModel(args.drafter) if args.drafter else load_built_model("hybrid", DrafterModels())
    rng = np.random.default_rng(0)
    if args.against is not None:
        compare({str(args.against): DraftModel(args.against), str(args.drafter or "built"): model}, args.repeats, rng)
        return 0

    def call(cached: DraftCache, start: int, n: int) -> Callable[[], object]:
        ids = [int(t) for t in rng.integers(1000, 5000, n)]
        return lambda: model.run(ids, range(start, start + n), causal_bias(start, n), rewound(model, cached, start))

    prefill = median_ms(call(model.empty_cache(), 0, 128), 3) / 128
    print(f"one prefill token (a 128-token call): {prefill:.2f} ms\n")
    print("| cached tokens | n tokens in the call | ms | ms over a 1-token call, per extra token |")
    print("|---|---|---|---|")
    for start in (150, 300):
        cached = cache_of(model, start, rng)
        one = median_ms(call(cached, start, 1), args.repeats)
        for n in (1, 2, 3, 4, 6, 8, 12, 16):
            ms = one if n == 1 else median_ms(call(cached, start, n), args.repeats)
            print(f"| {start} | {n} | {ms:.1f} | {'-' if n == 1 else f'{(ms - one) / (n - 1):.2f}'} |")

    cached = cache_of(model, 200, rng)
    logits = model.run([1234], [200], causal_bias(200, 1), rewound(model, cached, 200))[-1]
    q = draft_distribution(logits, SamplingParams(1.0), TAIL_MASS)
    noise, positions = RaceNoise(7, model.manifest.vocab_size), iter(range(201, 10**6))  # a new position each draw, as drafting goes
    parts = {
        "model call (1 token, 200 cached)": median_ms(call(cached, 200, 1), args.repeats),
        "q (draft_distribution, T=1)": median_ms(lambda: draft_distribution(logits, SamplingParams(1.0), TAIL_MASS), args.repeats),
        "the race's draw": median_ms(lambda: race_ranking(q.token_ids, q.probs, noise.rows([next(positions)])[0], 1), args.repeats),
    }
    print("\n| a sampled step's part | ms |\n|---|---|")
    for name, ms in parts.items():
        print(f"| {name} | {ms:.2f} |")
    print(f"| the step | {sum(parts.values()):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

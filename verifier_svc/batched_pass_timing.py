"""Batched passes timed at start: where the round price's curve for shared passes starts
(pass_price.py), as the lone passes timed at start (backends/pass_timing.py) start the lone one.

A device may run batched passes in another engine than lone ones (on CPU, torch's against
onnxruntime's), so their seconds are measured, not inferred from the lone passes'.
"""

from __future__ import annotations

import time

from verifier_svc.backends.pass_timing import PRICE_CONTEXT_TOKENS, prefilled_cache
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

# (sessions, new tokens each) of the timed passes: 2 to 32 packed rows, where a few sessions'
# rounds (plain, or with a few drafted nodes) put the passes under load.
SEED_SHAPES = ((2, 1), (2, 2), (2, 4), (2, 8), (4, 8))


def time_batched_passes(target: TargetModel, repeats: int = 2) -> list[tuple[int, int, float]]:
    """(rows, slots, seconds) of batched passes of SEED_SHAPES after PRICE_CONTEXT_TOKENS cached
    tokens a session, the minimum of `repeats` each (the caches are cut back after every pass)."""
    caches = [prefilled_cache(target, PRICE_CONTEXT_TOKENS) for _ in range(max(sessions for sessions, _ in SEED_SHAPES))]
    timed = []
    for sessions, new in SEED_SHAPES:
        inputs = [PassInput(cache, [1], chain([1] * (new - 1))) for cache in caches[:sessions]]
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            score_batch(target, inputs)
            best = min(best, time.perf_counter() - started)
            for cache in caches[:sessions]:
                cache.truncate(PRICE_CONTEXT_TOKENS)
        timed.append((sessions * new, sessions * PRICE_CONTEXT_TOKENS, best))
    return timed

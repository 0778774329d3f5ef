"""Batched passes timed at start: where the round price's curve for shared passes starts
(pass_price.py), as the lone passes timed at start (backends/pass_timing.py) start the lone one.

A device may run batched passes in another engine than lone ones (on CPU, torch's against
onnxruntime's), so their seconds are measured, not inferred from the lone passes'. A start beside
a busy neighbour must not seed the price with passes many times their cost (in a soak, verifiers
started beside one serving four clients on the same 2 cores timed a 2-row pass at 2.1-3.2 s, a
quiet start at 45 ms: docs/design/pass-cost.md): one untimed pass first (a first call's set-up
is not a pass's cost), then the shapes in sweeps, each shape's minimum kept, sweeps after the
first only within TIMING_BUDGET_SECONDS, and a shape never priced above a larger one. What a
busy start still gets wrong, service corrects: the seeds decay as passes are observed
(pass_price.py).
"""

from __future__ import annotations

import time

from verifier_svc.backends.pass_timing import PRICE_CONTEXT_TOKENS, prefilled_cache
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

# (sessions, new tokens each) of the timed passes, by rows: 2 to 32 packed rows, where a few
# sessions' rounds (plain, or with a few drafted nodes) put the passes under load.
SEED_SHAPES = ((2, 1), (2, 2), (2, 4), (2, 8), (4, 8))
# Sweeps after the first start only this long after the first began (a quiet 2-core host sweeps
# the shapes in ~0.4 s).
TIMING_BUDGET_SECONDS = 20.0


def time_batched_passes(
    target: TargetModel, repeats: int = 3, budget_seconds: float = TIMING_BUDGET_SECONDS
) -> list[tuple[int, int, float]]:
    """(rows, slots, seconds) of batched passes of SEED_SHAPES after PRICE_CONTEXT_TOKENS cached
    tokens a session (the caches are cut back after every pass): after one untimed pass, the
    minimum over up to `repeats` sweeps of the shapes (in turns, alternating order), each
    shape's seconds then at most any larger shape's (module docstring)."""
    caches = [prefilled_cache(target, PRICE_CONTEXT_TOKENS) for _ in range(max(sessions for sessions, _ in SEED_SHAPES))]

    def seconds(sessions: int, new: int) -> float:
        inputs = [PassInput(cache, [1], chain([1] * (new - 1))) for cache in caches[:sessions]]
        started = time.perf_counter()
        score_batch(target, inputs)
        elapsed = time.perf_counter() - started
        for cache in caches[:sessions]:
            cache.truncate(PRICE_CONTEXT_TOKENS)
        return elapsed

    seconds(*SEED_SHAPES[0])
    best = dict.fromkeys(SEED_SHAPES, float("inf"))
    began = time.perf_counter()
    for sweep in range(repeats):
        if sweep and time.perf_counter() - began > budget_seconds:
            break
        for shape in SEED_SHAPES if sweep % 2 == 0 else SEED_SHAPES[::-1]:
            best[shape] = min(best[shape], seconds(*shape))
    timed = [best[shape] for shape in SEED_SHAPES]
    for i in range(len(timed) - 2, -1, -1):  # larger shapes come later
        timed[i] = min(timed[i], timed[i + 1])
    return [(sessions * new, sessions * PRICE_CONTEXT_TOKENS, t) for (sessions, new), t in zip(SEED_SHAPES, timed)]

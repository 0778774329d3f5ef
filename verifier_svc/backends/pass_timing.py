"""Timing one lone pass at start, as the backends' tuning does."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from verifier_svc.token_tree import chain

if TYPE_CHECKING:
    from verifier_svc.kv_cache import KVCache
    from verifier_svc.target_model import TargetModel


def prefilled_cache(target: TargetModel, context_tokens: int) -> KVCache:
    """A new cache of the target's holding `context_tokens` entries: what the timed passes read."""
    cache = target.new_cache()
    target.score(cache, [1] * context_tokens, chain([]))
    return cache


def lone_pass_seconds(target: TargetModel, cache: KVCache, context_tokens: int, size: int) -> float:
    """Wall seconds of one lone pass of `size` new tokens (a root and a chain) on `cache`, which
    holds `context_tokens` entries and is cut back to them after. The pass returns its logits
    on the CPU, so the time includes the device's work."""
    started = time.perf_counter()
    target.score(cache, [1], chain([1] * (size - 1)))
    seconds = time.perf_counter() - started
    cache.truncate(context_tokens)
    return seconds


def lone_sizes_seconds(
    target: TargetModel, context_tokens: int, max_tokens: int, repeats: int, cache: KVCache | None = None
) -> list[float]:
    """Seconds of lone passes of 1..max_tokens tokens after `context_tokens` cached ones (on
    `cache`, which holds them; None: a new cache of the target's), the minimum of `repeats` each."""
    if cache is None:
        cache = prefilled_cache(target, context_tokens)
    return [
        min(lone_pass_seconds(target, cache, context_tokens, size) for _ in range(repeats)) for size in range(1, max_tokens + 1)
    ]


PRICE_CONTEXT_TOKENS = 128  # cached tokens before the passes time_lone_passes times


def time_lone_passes(target: TargetModel, max_tokens: int = 9, repeats: int = 2) -> list[float]:
    """Seconds of lone passes of 1..max_tokens tokens after PRICE_CONTEXT_TOKENS cached ones, the
    minimum of `repeats` each: where a backend does not tune, what the round price starts from
    (verifier_svc/pass_price.py)."""
    return lone_sizes_seconds(target, PRICE_CONTEXT_TOKENS, max_tokens, repeats)

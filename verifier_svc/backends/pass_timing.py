"""Timing one lone pass at start, as the backends' tuning does."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from verifier_svc.token_tree import chain

if TYPE_CHECKING:
    from verifier_svc.kv_cache import KVCache
    from verifier_svc.target_model import TargetModel


def lone_pass_seconds(target: TargetModel, cache: KVCache, context_tokens: int, size: int) -> float:
    """Wall seconds of one lone pass of `size` new tokens (a root and a chain) on `cache`, which
    holds `context_tokens` entries and is cut back to them after. The pass returns its logits
    on the CPU, so the time includes the device's work."""
    started = time.perf_counter()
    target.score(cache, [1], chain([1] * (size - 1)))
    seconds = time.perf_counter() - started
    cache.truncate(context_tokens)
    return seconds

"""A new session's cache made and filled from a prefix-cache hit: as before 2026-12-02 (a
DynamicCache built from the config, then per-layer updates) against KVCache now (a copy of one
DynamicCache per config, then KVCache.fill), for SmolLM2-135M's shapes
(30 layers, 3 KV heads of 64, float32) and an 11-token prefix stored by PrefixCache.store (as
the verifier's thread runs it: not in inference mode). Each includes making the new cache.
Best of 3 runs of 300.

    flock -x /tmp/specdec-cpu.lock python bench/results/prefix_fill_probe.py
"""

import time

import torch
from transformers import DynamicCache, LlamaConfig

from verifier_svc.kv_cache import GrowableLayer, KVCache
from verifier_svc.prefix_cache import PrefixCache

CONFIG = LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30, intermediate_size=1536, vocab_size=49152)
LENGTH = 11
PROMPT = list(range(100, 101 + LENGTH))
_source = KVCache(CONFIG)
for _index in range(CONFIG.num_hidden_layers):
    _source.cache.update(torch.randn(1, 3, LENGTH, 64), torch.randn(1, 3, LENGTH, 64), _index)
PREFIXES = PrefixCache(8192)
PREFIXES.store(PROMPT[:-1], _source)
_hit = PREFIXES.lookup(PROMPT)
assert _hit is not None and _hit.length == LENGTH
STORED = _hit.layers


def as_before() -> None:
    cache = DynamicCache(config=CONFIG)
    cache.layers = [GrowableLayer() for _ in cache.layers]
    for index, (keys, values) in enumerate(STORED):
        cache.update(keys[..., :LENGTH, :], values[..., :LENGTH, :], index)


def by_fill() -> None:
    KVCache(CONFIG).fill(STORED, LENGTH)


def best_ms(run, n: int = 300) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            run()
        times.append((time.perf_counter() - started) / n)
    return 1000 * min(times)


for name, run in (("before", as_before), ("KVCache.fill", by_fill)) * 3:
    print(f"{name:18s} {best_ms(run):.3f} ms per new session's cache")

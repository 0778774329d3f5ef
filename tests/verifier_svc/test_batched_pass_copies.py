"""A batched pass over 16 sessions moves no session's cache: every session's layer buffers keep
their storage (`data_ptr()`) through the pass, and the pass allocates nothing on the order of
the cached entries (torch's CPU memory profiler: what each op allocates and returns).

A tiny random-weight Llama (wide KV heads, small vocabulary) keeps the pass cheap and makes a
cache-sized allocation stand out: one session's keys of one layer are larger than anything a
pass needs that does not scale with the cache (its mask, [B, T, L + T], is the only tensor that
grows with L, and it is 1/16 of one session's cache per token)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, LlamaConfig

from verifier_svc.backends import attention_for
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.kv_cache import KVCache, kv_bytes_per_token
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import build_tree, chain

SESSIONS = 16
CONFIG = LlamaConfig(
    vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
    num_key_value_heads=8, head_dim=32, max_position_embeddings=2048, tie_word_embeddings=False,
)


def tiny_target() -> TargetModel:
    torch.manual_seed(0)
    implementation = attention_for(CONFIG, torch.device("cpu"))
    model = AutoModelForCausalLM.from_config(CONFIG, attn_implementation=implementation, dtype=torch.float32).eval()
    return TargetModel(model, "tiny")


def allocations(events: list) -> list[int]:  # type: ignore[type-arg]
    """What each op the profiler saw allocated and still held when it returned (its self CPU
    memory, in bytes): every tensor an op makes, a copy included."""
    return [e.self_cpu_memory_usage for e in events if e.self_cpu_memory_usage > 0]


def test_a_batched_pass_writes_in_place_and_copies_no_cache() -> None:
    target = tiny_target()
    generator = torch.Generator().manual_seed(1)
    caches = []
    for b in range(SESSIONS):
        cache = KVCache(CONFIG)
        target.score(cache, torch.randint(3, CONFIG.vocab_size, (400 + 20 * b,), generator=generator).tolist(), chain([]))
        caches.append(cache)
    lengths = [len(c) for c in caches]
    # Plain rounds and small trees: 1 to 4 new entries each, within every buffer's spare room.
    trees = [chain([]), chain([7]), build_tree([5, 6, 8], [-1, 0, -1])] * 6
    inputs = [PassInput(c, [11], trees[b]) for b, c in enumerate(caches)]
    before = [[(layer._buffers[0].data_ptr(), layer._buffers[1].data_ptr()) for layer in c.cache.layers] for c in caches]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        score_batch(target, inputs)
    after = [[(layer._buffers[0].data_ptr(), layer._buffers[1].data_ptr()) for layer in c.cache.layers] for c in caches]
    assert after == before, "a session's cache buffers moved"
    for cache, x, length in zip(caches, inputs, lengths):
        assert len(cache) == length + len(x.pending) + len(x.tree)
        for layer in cache.cache.layers:  # the views are of the same buffers
            assert layer.keys.data_ptr() == layer._buffers[0].data_ptr()

    sizes = allocations(prof.events())
    heads, head_dim = CONFIG.num_key_value_heads, CONFIG.head_dim
    one_session_layer = heads * min(lengths) * head_dim * 4  # one session's keys in one layer, fp32
    cached_bytes = sum(lengths) * kv_bytes_per_token(CONFIG, torch.float32)
    print(f"largest allocation {max(sizes)} B (one session's layer keys: {one_session_layer} B); "
          f"all allocations {sum(sizes)} B ({sum(sizes) / cached_bytes:.1%} of the cached {cached_bytes} B)")
    assert max(sizes) < one_session_layer
    assert sum(sizes) < cached_bytes / 4

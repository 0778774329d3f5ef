"""Prefix caching: which stored prefix a prompt reuses, that stored entries are private copies
within the token budget, and, on the real model, that a session reusing a prefix scores and
decides exactly like one that computed it."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from specdec.sampling_params import SamplingParams
from verifier_svc.kv_cache import KVCache
from verifier_svc.prefix_cache import PrefixCache
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

TINY = LlamaConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=8, vocab_size=100)


def filled_cache(length: int, seed: int = 0) -> KVCache:
    """A cache whose entry at position i of every layer is recognizable (random, seeded)."""
    cache = KVCache(TINY)
    g = torch.Generator().manual_seed(seed)
    for layer in range(TINY.num_hidden_layers):
        cache.cache.update(torch.randn(1, 1, length, 4, generator=g), torch.randn(1, 1, length, 4, generator=g), layer)
    return cache


def reuse(prefixes: PrefixCache, prompt: list[int]) -> tuple[int, KVCache]:
    cache = KVCache(TINY)
    hit = prefixes.lookup(prompt)
    if hit is not None:
        hit.fill(cache)
    return (hit.length if hit else 0), cache


def assert_same_entries(a: KVCache, b: KVCache, length: int) -> None:
    for la, lb in zip(a.cache.layers, b.cache.layers):
        assert torch.equal(la.keys[..., :length, :], lb.keys[..., :length, :])
        assert torch.equal(la.values[..., :length, :], lb.values[..., :length, :])


def test_an_identical_prompt_reuses_all_but_its_last_token() -> None:
    prefixes = PrefixCache(max_tokens=100, block_size=4)
    prompt = list(range(10, 21))  # 11 tokens
    source = filled_cache(len(prompt))
    prefixes.store(prompt[:-1], source)
    length, cache = reuse(prefixes, prompt)
    assert length == len(cache) == 10
    assert_same_entries(cache, source, 10)
    assert (prefixes.hits, prefixes.reused_tokens) == (1, 10)


def test_a_prompt_that_diverges_reuses_the_blocks_it_shares() -> None:
    prefixes = PrefixCache(max_tokens=100, block_size=4)
    stored = list(range(10, 21))
    prefixes.store(stored, filled_cache(len(stored)))
    assert reuse(prefixes, stored[:9] + [99, 98])[0] == 8  # shares 9 tokens: the last whole block ends at 8
    assert reuse(prefixes, stored + [1, 2, 3])[0] == 8  # extends it (the next chat turn): up to its last whole block
    assert reuse(prefixes, stored[:3] + [99] * 8)[0] == 0  # shares no whole block
    assert reuse(prefixes, [99] + stored)[0] == 0  # same tokens, other positions


def test_prompts_of_one_or_no_reusable_token_miss() -> None:
    prefixes = PrefixCache(max_tokens=100, block_size=4)
    prefixes.store([5], filled_cache(1))
    assert reuse(prefixes, [5])[0] == 0  # the last token must stay pending
    assert reuse(prefixes, [5, 6])[0] == 1


def test_stored_entries_are_copies() -> None:
    prefixes = PrefixCache(max_tokens=100, block_size=4)
    prompt = list(range(8))
    source = filled_cache(8)
    expected = filled_cache(8)  # same seed: the same values
    prefixes.store(prompt[:-1], source)
    for layer in source.cache.layers:  # the session goes on and rewrites its cache in place
        layer.keys.zero_()
        layer.values.zero_()
    length, cache = reuse(prefixes, prompt)
    assert length == 7
    assert_same_entries(cache, expected, 7)
    for layer in cache.cache.layers:  # and a reusing session cannot damage the entry either
        layer.keys.zero_()
    assert_same_entries(reuse(prefixes, prompt)[1], expected, 7)


def test_least_recently_used_entries_go_beyond_the_budget() -> None:
    prefixes = PrefixCache(max_tokens=20, block_size=4)
    a, b, c = ([i] * 8 for i in (1, 2, 3))
    prefixes.store(a, filled_cache(8))
    prefixes.store(b, filled_cache(8))
    assert reuse(prefixes, a + [0])[0] == 8  # a is now the most recently used
    prefixes.store(c, filled_cache(8))  # 24 tokens > 20: b goes
    assert len(prefixes) == 16
    assert reuse(prefixes, b + [0])[0] == 0
    assert reuse(prefixes, a + [0])[0] == 8 and reuse(prefixes, c + [0])[0] == 8
    prefixes.store(list(range(21)), filled_cache(21))  # longer than the whole budget: not kept
    assert len(prefixes) == 16


def test_a_zero_budget_turns_it_off() -> None:
    prefixes = PrefixCache(max_tokens=0)
    prefixes.store([1, 2, 3], filled_cache(3))
    assert len(prefixes) == 0 and reuse(prefixes, [1, 2, 3, 4])[0] == 0


@pytest.fixture(scope="module")
def target(reference_model) -> TargetModel:  # type: ignore[no-untyped-def]
    return TargetModel(reference_model, "reference")


def test_a_session_reusing_a_prefix_scores_and_decides_like_one_that_computed_it(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    system = "You are a careful assistant. Answer briefly and cite the passage you used. " * 2
    first = tokenizer.encode(system + "Question: what is the capital of France?")
    second = tokenizer.encode(system + "Question: what is the capital of Italy?")
    prefixes = PrefixCache(max_tokens=4096)
    limits = Limits(16, 8, 8192)
    greedy = SamplingParams(temperature=0.0)

    opener = Session(target, first, greedy, seed=0, limits=limits, prefix_cache=prefixes)
    assert opener.reused_prompt_tokens == 0
    opener.verify(RoundInput.point_masses([]))
    assert len(prefixes) == len(first) - 1

    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    for prompt, reused in ((first, len(first) - 1), (second, shared // 16 * 16)):
        plain = Session(target, prompt, greedy, seed=0, limits=limits)
        cached = Session(target, prompt, greedy, seed=0, limits=limits, prefix_cache=prefixes)
        assert cached.reused_prompt_tokens == reused > 0
        assert len(cached.cache) == 0 and cached.cached_tokens() == reused  # copied in by the first round
        cached.restore_prefix()
        assert len(cached.cache) == reused
        # The same logits for the whole first pass (fp32; only summation order differs) ...
        rows = [s.target.score(s.cache, prompt[len(s.cache):], chain(prompt[-3:])) for s in (plain, cached)]
        torch.testing.assert_close(rows[1].log_softmax(-1), rows[0].log_softmax(-1), atol=2e-4, rtol=0)
        # ... and the same tokens over several rounds.
        plain, cached = (Session(target, prompt, greedy, seed=0, limits=limits, prefix_cache=p) for p in (None, prefixes))
        for _ in range(2):
            assert cached.verify(RoundInput.point_masses([])).next_token == plain.verify(RoundInput.point_masses([])).next_token
        assert cached.tokens == plain.tokens

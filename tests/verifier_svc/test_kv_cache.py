"""kv_cache: the growable layers behave exactly like transformers' DynamicLayer (no model: random
keys and values through the same update / crop / keep sequence)."""

from __future__ import annotations

import torch
from transformers import DynamicCache, LlamaConfig

from verifier_svc.kv_cache import MIN_SPARE_SLOTS, GrowableLayer, KVCache

CONFIG = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32)


def entries(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, 2, n, 8, generator=generator), torch.randn(1, 2, n, 8, generator=generator)


def test_same_entries_as_a_dynamic_cache_through_appends_truncations_and_kept_paths() -> None:
    generator = torch.Generator().manual_seed(0)
    ours = KVCache(CONFIG)
    reference = DynamicCache(config=CONFIG)
    assert all(isinstance(layer, GrowableLayer) for layer in ours.cache.layers)
    # A prefill, then rounds: append pending + nodes, keep an accepted path, truncate the rest.
    for step, (new, offsets) in enumerate([(300, None), (9, [0, 2, 3]), (1, [0]), (17, [0, 1, 5, 6, 9]), (4, [])] * 12):
        start = len(ours)
        for index in range(CONFIG.num_hidden_layers):
            keys, values = entries(new, generator)
            got = ours.cache.update(keys, values, index)
            want = reference.update(keys, values, index)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        if offsets is None:
            continue
        ours.keep(start, offsets)
        # The reference: gather by hand and rebuild.
        for layer in reference.layers:
            index = torch.tensor([*range(start), *(start + o for o in offsets)])
            layer.keys, layer.values = layer.keys.index_select(-2, index), layer.values.index_select(-2, index)
        assert len(ours) == reference.get_seq_length() == start + len(offsets), step
        for mine, theirs in zip(ours.cache.layers, reference.layers):
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)


def test_appends_write_in_place_until_the_spare_room_is_used() -> None:
    generator = torch.Generator().manual_seed(1)
    cache = KVCache(CONFIG)
    cache.cache.update(*entries(100, generator), 0)
    storage = cache.cache.layers[0].keys.untyped_storage().data_ptr()
    for _ in range(MIN_SPARE_SLOTS // 4):
        cache.cache.update(*entries(4, generator), 0)
    assert cache.cache.layers[0].keys.untyped_storage().data_ptr() == storage  # no copy
    cache.cache.update(*entries(MIN_SPARE_SLOTS, generator), 0)
    assert cache.cache.layers[0].keys.untyped_storage().data_ptr() != storage  # grown once
    assert cache.cache.layers[0].keys.shape[-2] == 100 + MIN_SPARE_SLOTS + MIN_SPARE_SLOTS


def test_a_filled_cache_holds_what_updates_would_have_written_and_keeps_its_storage() -> None:
    """fill (a stored prompt prefix into a new session's cache) leaves what per-layer updates
    would: the entries, spare room of zeros, appends in place; into given storage where it has
    room (a slot: in_storage), else into buffers of the cache's own."""
    generator = torch.Generator().manual_seed(2)
    stored = [entries(20, generator) for _ in range(CONFIG.num_hidden_layers)]
    updated = KVCache(CONFIG)
    for index, (keys, values) in enumerate(stored):
        updated.cache.update(keys[..., :13, :], values[..., :13, :], index)
    slot = [(torch.full((1, 2, 40, 8), 7.0), torch.full((1, 2, 40, 8), 7.0)) for _ in stored]
    small = [(torch.zeros(1, 2, 10, 8), torch.zeros(1, 2, 10, 8)) for _ in stored]
    for storage in ((), slot, small):
        filled = KVCache(CONFIG, storage)
        filled.fill(stored, 13)
        assert len(filled) == 13 and filled.in_storage() == (storage is slot)
        for mine, theirs in zip(filled.cache.layers, updated.cache.layers):
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)
            if storage is not slot:  # the spare room an update leaves, zeros
                assert mine.buffers()[0].shape == theirs.buffers()[0].shape and not mine.buffers()[1][..., 13:, :].any()
        more = entries(3, generator)
        for index in range(CONFIG.num_hidden_layers):
            before = filled.cache.layers[index].buffers()[0].data_ptr()
            filled.cache.update(*more, index)
            assert filled.cache.layers[index].buffers()[0].data_ptr() == before  # appended in place
        assert len(filled) == 16 and torch.equal(filled.cache.layers[1].keys[..., 13:, :], more[0])
        assert filled.in_storage() == (storage is slot)


def test_a_prompts_entries_go_as_float16_bytes_unless_a_value_is_past_its_range() -> None:
    generator = torch.Generator().manual_seed(1)
    cache = KVCache(CONFIG)
    written = [entries(12, generator) for _ in range(CONFIG.num_hidden_layers)]
    for index, (keys, values) in enumerate(written):
        cache.cache.update(keys, values, index)
    sent = cache.prompt_entries(10)
    assert sent is not None and (sent.tokens, sent.heads, sent.head_dim, sent.dtype) == (10, 2, 8, "float16")
    for (keys, values), key_bytes, value_bytes in zip(written, sent.keys, sent.values):
        for entries_, data in ((keys, key_bytes), (values, value_bytes)):
            assert torch.equal(torch.frombuffer(bytearray(data), dtype=torch.float16).view(2, 10, 8), entries_[0, :, :10].half())
    assert sent.nbytes == 2 * CONFIG.num_hidden_layers * 2 * 10 * 8 * 2
    assert cache.prompt_entries(13) is None  # more than the cache holds
    cache.cache.layers[-1].values[0, 1, 3, 5] = 1e6  # past float16's largest value (65504)
    wide = cache.prompt_entries(10)
    assert wide is not None and wide.dtype == "float32"
    last = torch.frombuffer(bytearray(wide.values[-1]), dtype=torch.float32).view(2, 10, 8)
    assert last[1, 3, 5] == 1e6 and torch.equal(last, cache.cache.layers[-1].values[0, :, :10])

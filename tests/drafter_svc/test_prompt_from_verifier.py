"""A model drafter that is the target's own copy starts from the verifier's keys and values of the
prompt (verifier.proto, PromptCache) instead of reading it: it then drafts as if it had read the
prompt itself, runs only the tokens after it, and refuses entries that do not fit its model
(reading the prompt itself instead). The tiny random model stands in for the target's copy: its
own read gives the entries the verifier would send, so the drafts must be the same."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from drafter_svc.draft_cache import DraftCache
from drafter_svc.draft_model import DraftModel
from drafter_svc.onnx_drafter import OnnxDrafter
from specdec.sampling_params import SamplingParams
from specdec.v1.verifier_pb2 import PromptCache
from tests.drafter_build.tiny_model import tiny_drafter_folder

PROMPT = [3, 17, 9, 40, 2, 11, 25, 7, 30, 4]
GREEDY = SamplingParams(0.0)


@pytest.fixture(scope="module")
def target_copy(tmp_path_factory: pytest.TempPathFactory) -> DraftModel:
    """The tiny drafter loaded as if it were built as the target's copy (`quantized`)."""
    _, folder = tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter"))
    model = DraftModel(folder)
    model.manifest = replace(model.manifest, kind="quantized")
    return model


def drafter(model: DraftModel, limit: int = 64, window: int = 0, kept: int = 0) -> OnnxDrafter:
    return OnnxDrafter(model, GREEDY, np.random.default_rng(0), window=window, prompt_from_verifier_tokens=limit, prompt_cache_tokens=kept)


def entries_of(model: DraftModel, prompt: list[int], dtype: str = "float16") -> PromptCache:
    """The prompt's keys and values as a verifier sends them: here, the model's own read."""
    reader = drafter(model)
    reader.prefill(prompt)
    layers = reader._cache.entries()
    as_bytes = [a[0].astype(dtype).tobytes() for a in layers]
    heads, _, dim = layers[0].shape[1:]
    return PromptCache(tokens=len(prompt), num_kv_heads=heads, head_dim=dim, keys=as_bytes[0::2], values=as_bytes[1::2], dtype=dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_started_from_the_prompts_entries_it_drafts_as_if_it_had_read_the_prompt(target_copy: DraftModel, dtype: str) -> None:
    given, read = drafter(target_copy), drafter(target_copy)
    assert given.takes_prompt_cache(PROMPT) and given.reads_prompt
    assert given.adopt_prompt_cache(PROMPT, entries_of(target_copy, PROMPT, dtype))
    assert not given.reads_prompt and given.pending_tokens(PROMPT + [5]) == 1
    context = PROMPT + [5]  # the verifier's first token
    tolerance = 1e-5 if dtype == "float32" else 1e-2  # on logits; float16 rounds each entry by ~5e-4
    np.testing.assert_allclose(given.next_logits(context), read.next_logits(context), atol=tolerance)
    assert given.model_calls == 1  # the prompt was not run: only the new token
    chain = given.propose(context + [8], 4)
    assert chain == read.propose(context + [8], 4)
    assert given.model_calls == 1 + 4


def test_the_whole_prompt_is_taken_past_the_window(target_copy: DraftModel) -> None:
    """A window limits what the drafter reads itself, not what it is given: after the whole prompt's
    entries it drafts as a drafter that read all of it."""
    windowed, whole = drafter(target_copy, window=3), drafter(target_copy)
    assert windowed.adopt_prompt_cache(PROMPT, entries_of(target_copy, PROMPT, "float32"))
    assert windowed.propose(PROMPT + [5], 4) == whole.propose(PROMPT + [5], 4)


def test_only_a_target_copy_with_nothing_read_takes_a_prompt_within_its_limit(target_copy: DraftModel) -> None:
    assert not drafter(target_copy, limit=len(PROMPT) - 1).takes_prompt_cache(PROMPT)
    assert not drafter(target_copy, limit=0).takes_prompt_cache(PROMPT)
    assert drafter(target_copy, limit=len(PROMPT)).takes_prompt_cache(PROMPT)
    started = drafter(target_copy)
    started.prefill(PROMPT)
    assert not started.takes_prompt_cache(PROMPT)
    not_a_copy = DraftModel(target_copy.folder)  # built as `small`: its keys and values are not the target's
    assert not drafter(not_a_copy).takes_prompt_cache(PROMPT)


@pytest.mark.parametrize(
    "damage",
    ["heads", "head_dim", "tokens", "layers", "dtype", "short bytes", "after a read"],
)
def test_entries_that_do_not_fit_are_refused_and_the_prompt_is_read_instead(target_copy: DraftModel, damage: str) -> None:
    cache, given = entries_of(target_copy, PROMPT), drafter(target_copy)
    if damage == "heads":
        cache.num_kv_heads += 1
    elif damage == "head_dim":
        cache.head_dim //= 2
    elif damage == "tokens":
        cache.tokens -= 1
    elif damage == "layers":
        del cache.keys[-1], cache.values[-1]
    elif damage == "dtype":
        cache.dtype = "bfloat16"
    elif damage == "short bytes":
        cache.values[0] = cache.values[0][:-2]
    else:
        given.prefill(PROMPT[:4])
    assert not given.adopt_prompt_cache(PROMPT, cache)
    assert given.propose(PROMPT + [5], 4) == drafter(target_copy).propose(PROMPT + [5], 4)


def test_a_cache_of_entries_holds_them_with_room_after(target_copy: DraftModel) -> None:
    arrays = [torch.randn(2, 3, 4).numpy() for _ in range(4)]
    cache = DraftCache.of_entries([a.tobytes() for a in arrays[0::2]], [a.tobytes() for a in arrays[1::2]], "float32", 2, 4, 3, spare=5)
    assert cache is not None and cache.length == 3 and cache.capacity == 8
    for held, given in zip(cache.entries(), arrays):
        np.testing.assert_array_equal(held[0], given)
    assert DraftCache.of_entries([arrays[0].tobytes()], [], "float32", 2, 4, 3, spare=0) is None  # a layer's values missing


def test_a_prompt_taken_from_the_verifier_is_kept_for_later_sessions_of_the_process(target_copy: DraftModel) -> None:
    """With the drafter's prompt cache on, a prompt taken from the verifier is kept less its last
    token (no logits came with it): a later session with the same prompt reads it from there, one
    token in its first call, instead of asking the verifier, and drafts what a fresh read drafts."""
    prompt = [8, 1, 33, 21, 5, 19, 2]
    first = drafter(target_copy, kept=64)
    assert first.adopt_prompt_cache(prompt, entries_of(target_copy, prompt, "float32"))
    later = drafter(target_copy, kept=64)
    assert not later.takes_prompt_cache(prompt) and later.pending_tokens(prompt) == 1
    assert later.propose(prompt, 4) == drafter(target_copy).propose(prompt, 4)
    assert later.model_calls == 4  # the prompt's last token with the first draft's step, then 3 steps
    windowed = drafter(target_copy, window=3, kept=64)  # a read of the window would not match it: not kept
    assert windowed.adopt_prompt_cache(prompt[:5], entries_of(target_copy, prompt[:5], "float32"))
    assert drafter(target_copy, window=3, kept=64).takes_prompt_cache(prompt[:5])

"""The model drafters' prompt cache: a later session reading a prompt an earlier one read runs no
model call for it and draws the same draft; one sharing a beginning runs only the rest, and its q
is a fresh read's within float rounding; the bound keeps the most recently used prompts; off
(0), nothing is kept or reused, and a negative size ends the drafter process before it serves.
On the tiny random model (tests/drafter_build/tiny_model.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from drafter_svc.draft_cache import DraftCache
from drafter_svc.drafter_models import DrafterModels
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.onnx_drafter import OnnxDrafter
from drafter_svc.prompt_cache import PromptCache
from drafter_svc.server import run
from drafter_svc.settings import DrafterSettings
from specdec.sampling_params import SamplingParams
from tests.drafter_build.tiny_model import FINGERPRINT, tiny_drafter_folder
from tests.drafter_svc.test_onnx_drafter import ROLLBACK_TOLERANCE, _softmax

PROMPT = [3, 17, 9, 40, 2, 11, 25, 7, 30, 12]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter-prompts"))[1]


def drafter(folder: Path, sampling: SamplingParams, cache_tokens: int, seed: int = 0) -> OnnxDrafter:
    models = DrafterModels({"small": folder}, FINGERPRINT, prompt_cache_tokens=cache_tokens)
    made = make_drafter("onnx-small", sampling, seed, 0, models)
    assert isinstance(made, OnnxDrafter)
    return made


def kv(length: int, value: float) -> DraftCache:
    return DraftCache([np.full((1, 2, length, 4), value, np.float32) for _ in range(4)], length)


def test_the_longest_shared_beginning_is_reused_and_the_last_token_left_to_run() -> None:
    prompts = PromptCache()
    prompts.keep([1, 2, 3, 4], kv(4, 1.0), np.arange(5.0), max_tokens=100)
    prompts.keep([1, 2, 9], kv(3, 2.0), np.arange(5.0) + 10, max_tokens=100)
    assert prompts.reuse([7, 1, 2]) is None  # no kept prompt starts like it
    whole = prompts.reuse([1, 2, 3, 4])
    assert whole is not None and whole.tokens == 4 and whole.logits is not None and whole.logits[0] == 0.0
    whole.logits[0] = -1.0  # the caller's copy
    assert prompts.reuse([1, 2, 3, 4]).logits[0] == 0.0  # type: ignore[union-attr]
    longer = prompts.reuse([1, 2, 3, 4, 5, 6])
    assert longer is not None and longer.tokens == 4 and longer.logits is None
    shorter = prompts.reuse([1, 2, 3])  # shares 3 tokens, but its last must run: 2 reused
    assert shorter is not None and shorter.tokens == 2 and shorter.logits is None
    assert shorter.cache.length == 2
    other = prompts.reuse([1, 2, 9, 8])  # the second prompt is the longer match
    assert other is not None and other.tokens == 3 and float(other.cache.arrays[0][0, 0, 0, 0]) == 2.0


def test_kept_and_reused_caches_are_memory_of_their_own() -> None:
    """A model call writes into a session's cache in place: a session writing after what it
    reused, or the session that read the prompt writing on, leaves the kept prompt as it was."""
    prompts = PromptCache()
    read = kv(4, 1.0)
    prompts.keep([1, 2, 3, 4], read, np.zeros(5), max_tokens=100)
    read.arrays[0][:] = -1.0  # the reading session's later calls
    reused = prompts.reuse([1, 2, 3, 4, 5])
    assert reused is not None and reused.cache.length == 4 and reused.cache.capacity > 4  # room for the session's calls
    reused.cache.arrays[0][0, 0, :3] = 9.0
    again = prompts.reuse([1, 2, 3, 4])
    assert again is not None and float(again.cache.arrays[0][:, :, :4].min()) == float(again.cache.arrays[0][:, :, :4].max()) == 1.0


def test_the_bound_drops_the_least_recently_used_prompt_and_skips_longer_ones() -> None:
    prompts = PromptCache()
    prompts.keep([1, 2, 3], kv(3, 1.0), np.zeros(5), max_tokens=7)
    prompts.keep([4, 5, 6], kv(3, 1.0), np.zeros(5), max_tokens=7)
    assert prompts.reuse([1, 2, 3]) is not None  # now the most recently used
    prompts.keep([7, 8, 9], kv(3, 1.0), np.zeros(5), max_tokens=7)
    assert prompts.tokens == 6 and prompts.reuse([4, 5, 6, 0]) is None and prompts.reuse([1, 2, 3]) is not None
    prompts.keep(list(range(10, 18)), kv(8, 1.0), np.zeros(5), max_tokens=7)
    assert prompts.tokens == 6 and prompts.reuse(list(range(10, 18))) is None


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(0.8, 10)], ids=str)
def test_a_prompt_read_before_costs_a_later_session_no_model_call(folder: Path, params: SamplingParams) -> None:
    first = drafter(folder, params, cache_tokens=64)
    first.model.prompts = PromptCache()  # the process's one model of the folder: start empty
    draft = first.propose(PROMPT, 4)
    assert first.model_calls == 4 and first.model.prompts.tokens == len(PROMPT)
    again = drafter(folder, params, cache_tokens=64)
    assert again.pending_tokens(PROMPT) == 0 and again.catch_up_seconds(PROMPT) == 0.0
    assert again.propose(PROMPT, 4) == draft  # same seed: the same draws from the same q, bit for bit
    assert again.model_calls == 3  # the drafted tokens' calls only
    uncached = drafter(folder, params, cache_tokens=0)
    assert uncached.propose(PROMPT, 4) == draft and uncached.model_calls == 4


def test_a_session_sharing_a_beginning_reads_only_the_rest_and_its_q_is_a_fresh_reads(folder: Path) -> None:
    params = SamplingParams(1.0)
    first = drafter(folder, params, cache_tokens=64)
    first.model.prompts = PromptCache()
    first.prefill(PROMPT)
    prompt = PROMPT[:6] + [44, 45, 46]
    sharing = drafter(folder, params, cache_tokens=64)
    assert sharing.pending_tokens(prompt) == 3
    ours = sharing.next_logits(prompt)
    assert sharing.model_calls == 1 and sharing.model.prompts.tokens == len(PROMPT) + len(prompt)
    fresh = drafter(folder, params, cache_tokens=0).next_logits(prompt)
    assert np.abs(_softmax(ours) - _softmax(fresh)).max() < ROLLBACK_TOLERANCE


def test_off_nothing_is_kept(folder: Path) -> None:
    session = drafter(folder, SamplingParams(0.0), cache_tokens=0)
    session.model.prompts = PromptCache()
    session.propose(PROMPT, 2)
    assert session.model.prompts.tokens == 0
    with pytest.raises(ValueError, match="prompt_cache_tokens must be >= 0"):
        OnnxDrafter(session.model, SamplingParams(0.0), np.random.default_rng(0), prompt_cache_tokens=-1)


def test_a_negative_size_ends_the_drafter_before_it_serves_with_one_line() -> None:
    with pytest.raises(SystemExit, match=r"^--onnx-prompt-cache-tokens: must be >= 0, got -1$"):
        asyncio.run(run(DrafterSettings(port=0, onnx_prompt_cache_tokens=-1)))

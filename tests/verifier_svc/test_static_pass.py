"""Static passes (verifier_svc/static_pass.py), the passes a CUDA backend records as graphs, run
eagerly on the CPU over every architecture of tests/model_matrix.py: a lone pass of fixed shape
over a session's cache slot (its first 32, 64 or 128 entries) gives each tree node the logits
of its path scored as a plain sequence, over rounds whose padding rows land past the session's
length; its entries are the
session's cache that eager paths (keep, batched passes) then read; a session that outgrows its
slot, or finds none free, runs eagerly and stays exact; a slot returns when its session ends.
The recording itself needs a GPU: tests/verifier_svc/test_cuda.py."""

from __future__ import annotations

import gc
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from specdec.sampling_params import SamplingParams
from tests.model_matrix import ARCHITECTURES, VOCAB, WINDOW
from tests.verifier_svc.test_model_matrix import LOGIT_ATOL, random_tree, score_rounds
from verifier_svc.backends.cpu import CpuBackend
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import layer_windows
from verifier_svc.model_loader import load_model
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.static_pass import EagerRunner, PassRunner, SlotPasses
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

SIZES = (1, 2, 4, 8, 16)


class SlotBackend(CpuBackend):
    """The CPU backend with the CUDA backend's slots and static passes, run eagerly."""

    def __init__(self, model: torch.nn.Module, slots: int = 2, capacity: int = 128) -> None:
        super().__init__(model)
        self.passes = SlotPasses(model, layer_windows(model.config), slots, capacity, SIZES, EagerRunner, min_keys=32)
        self.static_runs = 0  # lone passes run as static ones

    def lone_pass(self, cache: KVCache, start: int, real: int) -> PassRunner | None:
        runner = super().lone_pass(cache, start, real)
        self.static_runs += runner is not None
        return runner


def slot_target(model: PreTrainedModel, name: str, **slots: int) -> tuple[TargetModel, SlotBackend]:
    target = TargetModel(model, name)
    backend = SlotBackend(model, **slots)
    target.backend = backend
    return target, backend


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def models(request, matrix_model_folder) -> tuple[TargetModel, SlotBackend, PreTrainedModel]:  # type: ignore[no-untyped-def]
    folder = matrix_model_folder(request.param)
    target, backend = slot_target(load_model(folder, "cpu", torch.float32), request.param)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    return target, backend, reference


def test_static_tree_passes_score_each_path_as_a_plain_sequence(models) -> None:  # type: ignore[no-untyped-def]
    """Rounds of random trees (padded to the next static size) after a prompt longer than the
    window; the kept path is read by the next round from the slot."""
    target, backend, reference = models
    rng = random.Random(3)
    prompt = [rng.randrange(3, VOCAB) for _ in range(WINDOW + 9)]
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))  # a prefill: larger than every static size, eager
    assert cache.in_storage()
    runs = backend.static_runs
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], (9, 0, 5, 2, 12))
    assert backend.static_runs == runs + 5, "every round ran as a static pass"
    assert cache.in_storage()


def test_static_and_eager_passes_interleave_over_one_slot(models) -> None:  # type: ignore[no-untyped-def]
    """A session in a slot scored in batched (eager) passes between its static ones gives the
    logits of a session that never used a static pass."""
    target, _, _ = models
    eager = TargetModel(target.model, target.name)  # the plain CPU backend: no slots
    rng = random.Random(4)
    prompt = [rng.randrange(3, VOCAB) for _ in range(20)]
    other = target.new_cache()
    target.score(other, prompt[:7], chain([]))
    caches = {"slot": target.new_cache(), "eager": eager.new_cache()}
    for way, t in (("slot", target), ("eager", eager)):
        t.score(caches[way], prompt, chain([]))
    assert caches["slot"].in_storage() and not caches["eager"].in_storage()
    for step in range(4):
        tree = random_tree(rng, 3)
        pending = [rng.randrange(3, VOCAB)]
        expected = eager.score(caches["eager"], pending, tree)
        if step % 2:
            got = score_batch(target, [PassInput(caches["slot"], pending, tree), PassInput(other, [5], chain([6]))])[0]
            other.truncate(7)
        else:
            got = target.score(caches["slot"], pending, tree)
        assert (got - expected).abs().max().item() < LOGIT_ATOL
        for cache in caches.values():
            cache.keep(len(cache) - len(tree), [0])


def test_a_session_past_its_slot_or_without_one_runs_eagerly_and_exactly(matrix_model_folder) -> None:  # type: ignore[no-untyped-def]
    """One slot of 36 entries: the second session finds none (its own buffers); the first runs
    static passes until start + size passes 36, then eagerly, then outgrows the slot. Both
    commit the greedy tokens of a target without slots. The slot returns when its session ends."""
    folder = matrix_model_folder("llama")
    model = load_model(folder, "cpu", torch.float32)
    target, backend = slot_target(model, "llama", slots=1, capacity=36)
    eager = TargetModel(model, "llama")
    limits = Limits(max_draft_tokens=8, max_draft_depth=4, context_length=target.context_length)
    prompt = list(range(3, 30))

    def generate(t: TargetModel) -> tuple[list[int], Session]:
        session = Session(t, prompt, SamplingParams(temperature=0.0), 0, limits)
        for _ in range(12):  # at least one token each: past the slot's 36 entries
            tokens = session.tokens
            session.verify(RoundInput.point_masses(tokens[-2:], [-1, 0]))  # a chain of two copies
        return session.tokens, session

    first, kept = generate(target)
    second, other = generate(target)
    assert backend.passes.free == []
    assert not other.cache.in_storage() and not kept.cache.in_storage(), "the first outgrew its slot"
    assert first == second == generate(eager)[0]
    assert backend.static_runs > 0
    del kept, other
    gc.collect()
    assert backend.passes.free == [0]

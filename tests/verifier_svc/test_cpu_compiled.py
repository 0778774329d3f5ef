"""Compiled CPU passes (verifier_svc/backends/cpu_compiled.py, `--cpu-compiled-passes`): a lone
pass of a session in a slot runs as a static pass with its decoder layers compiled by inductor in
groups (Llama's two layers one group; Gemma 2's alternating kinds one layer a group), its linear
layers weight first, and gives each tree node the logits of its path scored as a plain sequence; every slot's
pass of every shape is ready after a few compiles, none left to fall back to eager passes; a
round larger than the compiled sizes, and a prefill, run eagerly on the same cache."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.model_matrix import VOCAB
from tests.verifier_svc.test_model_matrix import score_rounds
from verifier_svc.backends import cpu
from verifier_svc.backends.cpu import COMPILED_SIZES, COMPILED_SLOTS, CpuBackend
from verifier_svc.backends.cpu_compiled import RECOMPILE_LIMIT, CompiledPassRunner, compiles
from verifier_svc.model_loader import load_model
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

# Compiles that every slot, size and key length may take in all: the slots and groups share one
# compiled function; one row, then any; the first key length, then any; a pass over a slot's whole
# capacity (a contiguous view of the slot) once more; the final norm twice. Measured: 8.
MAX_COMPILES = 8


# Llama's layout; Gemma 2's mixed sliding and full layers, attention soft cap and eager attention.
ARCHITECTURES = ("llama", "gemma2")


@pytest.fixture(scope="module", params=ARCHITECTURES)
def compiled(request, matrix_model_folder):  # type: ignore[no-untyped-def]
    """A tiny model (256 positions) with compiled passes over keys of 64, 128 and 256 entries."""
    folder = matrix_model_folder(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "COMPILED_MIN_KEYS", 64)
        target = TargetModel(load_model(folder, "cpu", torch.float32), request.param, compiled_passes=True)
    before = compiles()
    target.backend.prepare(target)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    return target, reference, compiles() - before


def test_every_shape_is_ready_after_a_few_compiles(compiled) -> None:  # type: ignore[no-untyped-def]
    target, _, count = compiled
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.passes is not None
    assert backend.passes.keys == [64, 128, 256]
    shapes = sum(size <= keys for size in COMPILED_SIZES for keys in backend.passes.keys)
    assert len(backend.passes.runners) == COMPILED_SLOTS * shapes
    assert CompiledPassRunner.made >= COMPILED_SLOTS * shapes
    assert 1 <= count <= MAX_COMPILES < RECOMPILE_LIMIT, f"{count} compiles for {COMPILED_SLOTS * shapes} passes"


def test_compiled_tree_passes_score_each_path_as_a_plain_sequence(compiled) -> None:  # type: ignore[no-untyped-def]
    """Rounds of random trees after a prompt (an eager prefill): those within the compiled sizes
    run compiled, a larger one eagerly, on one slot; each node's logits are its path's."""
    target, reference, _ = compiled
    rng = random.Random(5)
    prompt = [rng.randrange(3, VOCAB) for _ in range(50)]  # the rounds cross from 64 keys to 128
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))
    assert cache.in_storage()
    runs, count = CompiledPassRunner.runs, compiles()
    # 12 nodes: a 13-token pass, past the largest compiled size
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], (0, 3, 7, 12, 1))
    assert CompiledPassRunner.runs == runs + 4, "every round within the compiled sizes ran compiled"
    assert compiles() == count, "no pass compiled anything after prepare"
    assert cache.in_storage()

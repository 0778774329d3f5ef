"""Compiled CPU passes (verifier_svc/backends/cpu_compiled.py, `--cpu-compiled-passes`): a lone
pass of a session in a slot runs as a static pass with its decoder layers compiled by inductor in
groups (Llama's two layers one group; Gemma 2's alternating kinds one layer a group), its linear
layers weight first, and gives each tree node the logits of its path scored as a plain sequence; every slot's
pass of every shape is ready after a few compiles, none left to fall back to eager passes; a
round larger than the compiled sizes, a one-token pass where one-row copies exist, and a prefill
run eagerly on the same cache; a second start with the same store compiles nothing, and a stored
compile that no longer loads is removed (backends/stored_steps.py)."""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.model_matrix import VOCAB
from tests.verifier_svc.test_model_matrix import score_rounds
from verifier_svc.backends import cpu
from verifier_svc.backends.cpu import COMPILED_SIZES, COMPILED_SLOTS, CpuBackend
from verifier_svc.backends.cpu_compiled import CompiledPassRunner, compiles
from verifier_svc.backends.stored_steps import StoredSteps, default_store, store_folder
from verifier_svc.model_loader import load_model
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

# Compiles that every slot, size and key length may take in all: the slots and groups share one
# compiled function; one row, then any; the first key length, then any; a pass over a slot's whole
# capacity (a contiguous view of the slot) once more; the final norm twice. Measured: 8.
MAX_COMPILES = 8


# Llama's layout; Gemma 2's mixed sliding and full layers, attention soft cap and eager attention.
ARCHITECTURES = ("llama", "gemma2")


def compiled_target(folder: Path, name: str, store: Path | None) -> TargetModel:
    """A tiny model (256 positions) with compiled passes over keys of 64, 128 and 256 entries,
    prepared."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "COMPILED_MIN_KEYS", 64)
        target = TargetModel(load_model(folder, "cpu", torch.float32), name, compiled_passes=True, compiled_store=store)
    target.backend.prepare(target)
    return target


@pytest.fixture(scope="module", params=ARCHITECTURES)
def compiled(request, matrix_model_folder, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The target compiled into an empty store, its eager reference, the compiles made, the store."""
    folder, store = matrix_model_folder(request.param), tmp_path_factory.mktemp("store")
    before = compiles()
    target = compiled_target(folder, request.param, store)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    return target, reference, compiles() - before, store


def test_every_shape_is_ready_after_a_few_compiles(compiled) -> None:  # type: ignore[no-untyped-def]
    target, _, count, _ = compiled
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.passes is not None
    assert backend.passes.keys == [64, 128, 256]
    assert backend.one_row and backend.passes.sizes == [size for size in COMPILED_SIZES if size > 1], "one-token passes read the copies eagerly"
    shapes = sum(size <= keys for size in backend.passes.sizes for keys in backend.passes.keys)
    assert len(backend.passes.runners) == COMPILED_SLOTS * shapes
    assert CompiledPassRunner.made >= COMPILED_SLOTS * shapes
    assert 1 <= count <= MAX_COMPILES, f"{count} compiles for {COMPILED_SLOTS * shapes} passes"


def test_compiled_tree_passes_score_each_path_as_a_plain_sequence(compiled) -> None:  # type: ignore[no-untyped-def]
    """Rounds of random trees after a prompt (an eager prefill): those within the compiled sizes
    run compiled, a larger one eagerly, on one slot; each node's logits are its path's."""
    target, reference, _, _ = compiled
    rng = random.Random(5)
    prompt = [rng.randrange(3, VOCAB) for _ in range(50)]  # the rounds cross from 64 keys to 128
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))
    assert cache.in_storage()
    runs, count = CompiledPassRunner.runs, compiles()
    # passes of 1, 4, 8, 13 and 2 tokens: 13 past the largest compiled size, 1 read eagerly from the one-row copies
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], (0, 3, 7, 12, 1))
    assert CompiledPassRunner.runs == runs + 3, "every round within the compiled sizes ran compiled"
    assert compiles() == count, "no pass compiled anything after prepare"
    assert cache.in_storage()


def test_without_one_row_copies_one_token_passes_run_compiled(matrix_model_folder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As bfloat16 targets serve (no copies): one-token passes are compiled too (made on first use
    here, not prepared), and give the reference's logits."""
    folder = matrix_model_folder("llama")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "COMPILED_MIN_KEYS", 64)
        target = TargetModel(load_model(folder, "cpu", torch.float32), "llama", compiled_passes=True, one_row_copies=False, compiled_store=tmp_path)
    backend = target.backend
    assert isinstance(backend, CpuBackend) and not backend.one_row and backend.passes is not None
    assert backend.passes.sizes == list(COMPILED_SIZES)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    rng = random.Random(3)
    prompt = [rng.randrange(3, VOCAB) for _ in range(30)]
    cache = target.new_cache()
    target.score(cache, prompt[:-1], chain([]))
    runs = CompiledPassRunner.runs
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], (0, 0, 1))  # 1, 1 and 2 tokens
    assert CompiledPassRunner.runs == runs + 3


def test_a_second_start_loads_every_compile_from_the_store_and_scores_the_same(compiled, matrix_model_folder) -> None:  # type: ignore[no-untyped-def]
    """A new target over a fresh load of the same model and the same store compiles nothing: every
    group's code is read back, and its passes still give each node its path's logits."""
    first, reference, count, store = compiled
    name = first.name
    folders = [path for path in store.iterdir() if path.is_dir()]
    assert len(folders) == 1 and len(list(folders[0].glob("*.bin"))) == count
    before = compiles()
    second = compiled_target(matrix_model_folder(name), name, store)
    assert compiles() == before, "nothing compiled on the second start"
    steps = second.backend.compiled.step  # type: ignore[attr-defined]
    assert isinstance(steps, StoredSteps) and steps.loaded == count and steps.folder == folders[0]
    rng = random.Random(11)
    prompt = [rng.randrange(3, VOCAB) for _ in range(40)]
    cache = second.new_cache()
    second.score(cache, prompt[:-1], chain([]))
    runs = CompiledPassRunner.runs
    score_rounds(second, reference, rng, cache, prompt[:-1], prompt[-1:], (0, 3, 7, 1))  # 1 token eagerly, then 4, 8, 2
    assert CompiledPassRunner.runs == runs + 3 and compiles() == before


def test_a_stored_compile_that_no_longer_loads_is_removed_and_the_passes_are_still_made(compiled, matrix_model_folder, tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The file is removed with a warning; its shapes are compiled again unless another stored
    compile takes them (a later compile may cover an earlier one's shapes too)."""
    name, count, store = compiled[0].name, compiled[2], compiled[3]
    shutil.copytree(store, tmp_path, dirs_exist_ok=True)
    (folder,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    files = sorted(folder.glob("*.bin"))
    files[0].write_bytes(b"not a compiled function")
    before = compiles()
    with caplog.at_level(logging.WARNING, logger="verifier_svc.backends.stored_steps"):
        target = compiled_target(matrix_model_folder(name), name, tmp_path)
    assert f"removing compiled pass {files[0]}" in caplog.text
    assert not files[0].exists()
    made = compiles() - before
    assert made <= 1, "at most the one lost is compiled again, the others read back"
    assert target.backend.compiled.step.loaded == count - 1  # type: ignore[attr-defined]
    assert len(list(folder.glob("*.bin"))) == count - 1 + made
    assert all(key in target.backend.passes.runners for key in compiled[0].backend.passes.runners)  # type: ignore[union-attr]


def test_the_store_setting(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert default_store() == tmp_path / "compiled-passes"
    assert store_folder("") == default_store()
    assert store_folder("off") is None
    assert store_folder("~/x") == Path.home() / "x"


def test_a_store_that_cannot_be_written_leaves_compiles_in_the_process(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    blocked = tmp_path / "a file"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING, logger="verifier_svc.backends.stored_steps"):
        steps = StoredSteps(blocked / "store")
    assert steps.folder is None and steps.steps == []
    assert f"the store {blocked / 'store'} cannot be written" in caplog.text

"""onnxruntime lone passes (verifier_svc/backends/onnx_passes.py, `--cpu-onnx-passes`): on a
float32 Llama, lone passes of up to MAX_TOKENS tokens (a prompt's prefill too) run through the
exported step, reading and writing the session's cache where it lies: each tree node gets its
path's logits scored as a plain sequence by transformers' eager forward, across rollbacks, kept
paths and the cache's growth; larger passes stay torch's; other models and dtypes run in torch."""

from __future__ import annotations

import importlib.util
import logging
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.model_matrix import VOCAB, plain_logits
from tests.verifier_svc.test_model_matrix import LOGIT_ATOL, score_rounds
from verifier_svc import kv_cache
from verifier_svc.backends.cpu import CpuBackend
from verifier_svc.backends import onnx_passes
from verifier_svc.backends.onnx_passes import OnnxPasses
from verifier_svc.model_loader import load_model
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain


@pytest.fixture(scope="module")
def llama(matrix_model_folder):  # type: ignore[no-untyped-def]
    """(the tiny Llama served with onnxruntime passes, its eager reference)."""
    folder = matrix_model_folder("llama")
    target = TargetModel(load_model(folder, "cpu", torch.float32), "llama", onnx_passes=True)
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    return target, reference


def onnx_of(target: TargetModel) -> OnnxPasses:
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.onnx is not None
    return backend.onnx


def rounds_after_a_prompt(llama, seed: int, prompt_tokens: int, node_counts: tuple[int, ...]) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """A random prompt's prefill, then rounds of random trees of `node_counts` nodes (score_rounds:
    each node's logits its path's as a plain sequence): (passes through onnxruntime in the
    prefill, in the rounds)."""
    target, reference = llama
    rng = random.Random(seed)
    prompt = [rng.randrange(3, VOCAB) for _ in range(prompt_tokens)]
    cache = target.new_cache()
    runs = onnx_of(target).runs
    target.score(cache, prompt[:-1], chain([]))
    prefill = onnx_of(target).runs - runs
    score_rounds(target, reference, rng, cache, prompt[:-1], prompt[-1:], node_counts)
    return prefill, onnx_of(target).runs - runs - prefill


def test_tree_passes_score_each_path_as_a_plain_sequence(llama) -> None:  # type: ignore[no-untyped-def]
    """A prefill, then rounds of 1, 4, 8, 13, 17 and 2 tokens, all through onnxruntime, each
    keeping a path (the cache's other entries stay behind as stale ones)."""
    assert rounds_after_a_prompt(llama, 7, 40, (0, 3, 7, 12, 16, 1)) == (1, 6), "a prompt's prefill runs through onnxruntime too"


def test_a_sessions_first_pass_its_prompt_with_a_tree_scores_each_path(llama) -> None:  # type: ignore[no-untyped-def]
    """A session's first round reads its prompt and its draft tree in one pass over an empty
    cache: siblings share a position there too (the attention node must rotate at the positions
    given, not in the pass's order: the pass runs as two, the prompt then the tree)."""
    target, reference = llama
    rng = random.Random(11)
    prompt = [rng.randrange(3, VOCAB) for _ in range(12)]
    runs = onnx_of(target).runs
    for nodes in (2, 5, 9):
        score_rounds(target, reference, rng, target.new_cache(), [], prompt, (nodes, 3))
    assert onnx_of(target).runs - runs == 3 * 2 + 3, "all through onnxruntime, each first pass as two runs"


def test_passes_past_max_tokens_run_in_torch(llama, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past MAX_TOKENS (the attention node would hold heads x n x (L + n) probabilities) a pass is
    torch's, on the same cache, and the rounds after it onnxruntime's again: of a 19-token
    prefill and rounds of 4, 13 and 2 tokens past 8, the 4- and 2-token rounds."""
    monkeypatch.setattr(onnx_passes, "MAX_TOKENS", 8)
    assert rounds_after_a_prompt(llama, 9, 20, (3, 12, 1)) == (0, 2)


def test_plain_decoding_past_the_cache_buffers_capacity(llama) -> None:  # type: ignore[no-untyped-def]
    """One-token passes through onnxruntime from a 5-token prompt until the cache's buffers have
    grown twice; the logits at the end are the plain sequence's."""
    target, reference = llama
    rng = random.Random(8)
    tokens = [rng.randrange(3, VOCAB) for _ in range(5)]
    cache = target.new_cache()
    target.score(cache, tokens[:-1], chain([]))
    capacities = {cache.cache.layers[0].buffers()[0].shape[-2]}  # type: ignore[index]
    while len(capacities) < 3:
        logits = target.score(cache, tokens[-1:], chain([]))
        tokens.append(int(logits[0].argmax()))
        capacities.add(cache.cache.layers[0].buffers()[0].shape[-2])  # type: ignore[index]
    worst = (logits[0] - plain_logits(reference, tokens[:-1])).abs().max().item()
    assert worst < LOGIT_ATOL, f"logits differ from the plain sequence's by {worst:.3g} after {len(tokens)} tokens"
    assert len(cache) == len(tokens) - 1


def test_a_pass_writes_its_entries_into_the_caches_buffers_where_they_lie(llama) -> None:  # type: ignore[no-untyped-def]
    """The attention nodes' present outputs are the cache's own buffers: a pass with room in them
    moves no buffer, leaves the earlier entries as they were and writes the entries torch's
    forward writes; the spare room past them is not touched."""
    target, _ = llama
    backend = target.backend
    assert isinstance(backend, CpuBackend)
    caches = [target.new_cache(), target.new_cache()]
    for cache in caches:
        target.score(cache, [5, 6, 7, 8], chain([]))
    onnx_cache, torch_cache = caches
    buffers = [buffer for layer in onnx_cache.cache.layers for buffer in layer.buffers()]  # type: ignore[union-attr]
    before = [buffer.clone() for buffer in buffers]
    runs = onnx_of(target).runs
    target.score(onnx_cache, [9], chain([10, 11]))
    with backend._passes_in_torch():
        target.score(torch_cache, [9], chain([10, 11]))
    assert onnx_of(target).runs == runs + 1 and len(onnx_cache) == len(torch_cache) == 7
    after = [buffer for layer in onnx_cache.cache.layers for buffer in layer.buffers()]  # type: ignore[union-attr]
    assert all(a is b for a, b in zip(after, buffers)), "no buffer moved"
    assert all(torch.equal(b[..., :4, :], a[..., :4, :]) and torch.equal(b[..., 7:, :], a[..., 7:, :]) for a, b in zip(after, before))
    for mine, theirs in zip(onnx_cache.cache.layers, torch_cache.cache.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-5) and torch.allclose(mine.values, theirs.values, atol=1e-5)


def test_greedy_passes_of_up_to_greedy_rows_find_their_argmax_with_the_int8_bounded_head(llama) -> None:  # type: ignore[no-untyped-def]
    """A pass whose rows are read only for their argmax, of up to GREEDY_ROWS rows, takes the
    final norm's rows from the graph and the greedy head's logits (the full logits' argmax, the
    tokens kept with their logits); a larger one runs the graph's head as any other pass."""
    target, _ = llama
    onnx = onnx_of(target)
    rng = random.Random(11)
    prompt = [rng.randrange(3, VOCAB) for _ in range(20)]
    greedy_cache, full_cache = target.new_cache(), target.new_cache()
    runs = onnx.greedy_runs
    for cache, argmax_only in ((greedy_cache, True), (full_cache, False)):
        target.score(cache, prompt[:-1], chain([]), argmax_only)
    assert onnx.greedy_runs == runs + 1
    pending = prompt[-1:]
    rounds = ([], [7], [7, 8], [9], [], [4, 5, 6, 7])
    for drafted in rounds:
        greedy = target.score(greedy_cache, pending, chain(drafted), argmax_only=True)
        full = target.score(full_cache, pending, chain(drafted))
        assert torch.equal(greedy.argmax(dim=1), full.argmax(dim=1))
        kept = torch.isfinite(greedy)
        assert torch.allclose(greedy[kept], full[kept], atol=LOGIT_ATOL)
        assert bool(kept.all()) == (len(drafted) + 1 > onnx_passes.GREEDY_ROWS), "only small passes leave tokens out"
        pending = [int(full[-1].argmax())]
    assert onnx.greedy_runs == runs + 1 + sum(len(drafted) + 1 <= onnx_passes.GREEDY_ROWS for drafted in rounds)


def test_a_greedy_head_that_differs_from_the_models_forward_is_turned_off_at_start(llama, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    target, _ = llama
    backend, onnx = target.backend, onnx_of(target)
    assert onnx.greedy
    try:
        backend.prepare(target)
        assert onnx.greedy and "; the argmax of greedy passes of up to 4 rows from an int8-bounded head" in backend.engine()
        monkeypatch.setattr(onnx_passes, "rescored", lambda head, hidden, candidates: torch.from_numpy(hidden @ head.T).flip(dims=[1]))
        with caplog.at_level(logging.WARNING, logger="verifier_svc.backends.cpu"):
            backend.prepare(target)
        assert backend.onnx is onnx and not onnx.greedy
        assert "the int8-bounded greedy head off: its argmax or logits differ from the model's forward" in caplog.text
        assert "int8-bounded head" not in backend.engine()
    finally:
        onnx.greedy = True


def test_a_grown_buffers_spare_room_is_finite(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Memory fresh from torch.empty may hold NaN; a pass that reads a whole buffer behind its mask
    (a static pass) multiplies the spare room by zero weights, so it must be finite."""
    monkeypatch.setattr(kv_cache.torch, "empty", lambda shape, **kw: torch.full(shape, float("nan"), **kw))
    layer = kv_cache.GrowableLayer()
    layer.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    keys, values = layer.buffers()  # type: ignore[misc]
    assert keys.shape[-2] > 3 and torch.isfinite(keys).all() and torch.isfinite(values).all()


@pytest.mark.parametrize("architecture,dtype", [("gemma2", torch.float32), ("llama", torch.bfloat16)])
def test_other_models_and_dtypes_run_in_torch(matrix_model_folder, caplog, architecture: str, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="verifier_svc.backends.cpu"):
        target = TargetModel(load_model(matrix_model_folder(architecture), "cpu", dtype), architecture, onnx_passes=True)
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.onnx is None
    [line] = [r for r in caplog.records if "onnxruntime lone passes: not for this model" in r.getMessage()]
    # Only the dtype keeps a Llama out: the operator is warned that float32 serves faster here.
    assert (line.levelno, "--dtype float32" in line.getMessage()) == ((logging.WARNING, True) if architecture == "llama" else (logging.INFO, False))
    cache = target.new_cache()
    target.score(cache, [5, 6, 7], chain([]))
    assert backend.lone_pass(cache, len(cache), 1) is None


def test_compiled_passes_asked_for_take_the_lone_passes(matrix_model_folder, caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="verifier_svc.backends.cpu"):
        target = TargetModel(load_model(matrix_model_folder("llama"), "cpu", torch.float32), "llama", compiled_passes=True, onnx_passes=True)
    assert isinstance(target.backend, CpuBackend) and target.backend.onnx is None and target.backend.passes is not None
    assert "onnxruntime lone passes: off with compiled passes" in caplog.text


def test_without_onnxruntime_installed_the_passes_run_in_torch(matrix_model_folder, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "onnxruntime" else find_spec(name, *args))
    with caplog.at_level(logging.INFO, logger="verifier_svc.backends.cpu"):
        target = TargetModel(load_model(matrix_model_folder("llama"), "cpu", torch.float32), "llama", onnx_passes=True)
    assert isinstance(target.backend, CpuBackend) and target.backend.onnx is None
    assert "onnxruntime lone passes: onnxruntime not installed (pip install 'specdec[verifier]'): passes run in torch" in caplog.text


def test_a_step_that_differs_from_the_models_forward_is_turned_off_at_start(llama, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """prepare checks one pass against the model's forward: kept as exported, turned off (with a
    warning, the passes then torch's) when its logits are a unit off."""
    target, _ = llama
    backend, onnx = target.backend, onnx_of(target)
    try:
        backend.prepare(target)
        assert backend.onnx is onnx and "; lone passes of up to 512 tokens through onnxruntime, the rest in torch; " in backend.engine()
        score = OnnxPasses.score
        monkeypatch.setattr(OnnxPasses, "score", lambda self, *args: score(self, *args) + 1.0)
        with caplog.at_level(logging.WARNING, logger="verifier_svc.backends.cpu"):
            backend.prepare(target)
        assert backend.onnx is None and "onnxruntime lone passes off: their logits differ from the model's forward by 1" in caplog.text
        # ModelInfo.engine says so too.
        assert "; every pass in torch (onnxruntime's passes off: their logits differed from the model's forward by 1 at start); " in backend.engine()
    finally:
        backend.onnx = onnx


def test_the_optimized_step_is_kept_and_read_back_and_one_that_no_longer_loads_is_made_again(llama, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    target, _ = llama
    cache = target.new_cache()
    target.score(cache, [5, 6, 7, 8], chain([]))
    mask = torch.ones(2, len(cache) + 2, dtype=torch.bool).tril(len(cache))

    @torch.inference_mode()  # as TargetModel.score runs it
    def logits(passes: OnnxPasses) -> torch.Tensor:
        out = passes.score(cache, [9, 10], torch.tensor([4, 5]), mask, 4, 0)
        cache.truncate(4)
        return out

    with caplog.at_level(logging.INFO, logger="verifier_svc.backends.onnx_passes"):
        first = OnnxPasses(target.model, 1, tmp_path)
        (folder,) = list(tmp_path.iterdir())
        assert (folder / "step.onnx").is_file() and "exported, kept in" in caplog.text
        caplog.clear()
        second = OnnxPasses(target.model, 1, tmp_path)
        assert f"read from {folder}" in caplog.text
        assert torch.equal(logits(first), logits(second))
        (folder / "step.onnx").write_bytes(b"not a graph")
        caplog.clear()
        third = OnnxPasses(target.model, 1, tmp_path)
    assert "does not load" in caplog.text and "exported, kept in" in caplog.text
    assert torch.equal(logits(third), logits(first))


def test_tuning_times_torchs_layout_in_torch_and_the_lone_passes_in_onnxruntime(llama, caplog) -> None:  # type: ignore[no-untyped-def]
    """Beside onnxruntime's lone passes torch runs the batched ones: tuning chooses torch's layout
    from passes it runs in torch (none of them through onnxruntime), then times the lone passes
    as they run (through onnxruntime, after a prefill there), and serves with the passes on."""
    target, _ = llama
    backend = target.backend
    kept = backend.weight_first, backend.linear_min_rows
    runs = onnx_of(target).runs
    try:
        with caplog.at_level(logging.INFO, logger="verifier_svc.backends.cpu"):
            seconds = target.tune_pass_sizes(context_tokens=16, max_tokens=4, repeats=1)
        assert len(seconds) == 4 and onnx_of(target).runs == runs + 5, "only the timing's prefill and lone passes run in onnxruntime"
        rows = target.min_pass_tokens
        assert f"torch's passes (batched): {'weight first' if backend.weight_first else 'F.linear'}, {f'padded to {rows} rows' if rows > 1 else 'unpadded'}" in caplog.text
    finally:
        backend.weight_first, backend.linear_min_rows = kept


def test_a_pass_profiled_by_onnxruntime_runs_on_a_second_session_and_the_served_one_comes_back(llama) -> None:  # type: ignore[no-untyped-def]
    """The engine benchmark's breakdown of a pass onnxruntime runs (bench/engine_parts.py): its
    kernels by kind from onnxruntime's profiler, within the pass's wall time; the served session
    and its bindings are back afterwards, and a pass after it gives its path's logits."""
    from bench.engine_parts import pass_breakdown

    target, reference = llama
    served = onnx_of(target).session
    parts = pass_breakdown(target, 24, 4, 3)
    kernels = [parts[name] for name in ("linear layers (without the head)", "output head", "attention", "other tensor ops")]
    assert all(ms > 0 for ms in kernels) and sum(kernels) < 1.5 * parts["wall"], parts
    assert onnx_of(target).session is served
    assert rounds_after_a_prompt(llama, 11, 12, (2,)) == (1, 1)

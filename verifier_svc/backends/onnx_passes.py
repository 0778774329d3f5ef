"""Lone passes through onnxruntime, for the CPU backend (`--cpu-onnx-passes`).

A one-token pass of the default model through torch's eager forward spends a third of its time
between kernels (~6,500 op dispatches); onnxruntime runs the same step as one graph at the speed
of llama.cpp's float32 decoding on this CPU (docs/design/onnx-passes.md). The graph is the model
drafters' Llama step (drafter_build/llama_graph.py), exported from the served model at load and
held in one InferenceSession (its own copy of the weights); onnxruntime's optimized graph is kept on disk
(onnx_step_store.py), so a later start with the same weights, code and versions reads it in ~1 s
instead of exporting and optimizing again (~15 s for the default model).

A lone pass of up to MAX_TOKENS tokens runs here, a session's first (its prompt) too: the cache's
buffers (grown first where they lack room: GrowableLayer.reserve) are bound to the graph's cache
inputs and, at the same addresses, its present outputs, so each layer's attention node reads the
session's entries where they lie and writes the pass's after them; only the rows asked for go
through the output head. Larger passes and batched passes stay torch's. The logits are the served
model's step computed in another order (float rounding: ~3e-5 on the default model's); the tests
hold it to torch's forward and greedy output to transformers' generate(). A pass whose rows are
read only for their argmax (a greedy round: `argmax_only`) of up to GREEDY_ROWS rows skips the
graph's float32 head: the graph's int8-bounded head (greedy_filter.py) names the few tokens that
may be the argmax, and only they are scored in float32 (verifier_svc/greedy_head.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from drafter_build.llama_graph import is_llama_layout, rows_io_names
from drafter_svc.draft_cache import prompt_rows
from specdec.extras import importable
from specdec.onnx_threads import session_options
from verifier_svc.backends.onnx_step_store import CANDIDATES, STEP_FILE, exported_session, graph_digest, stored_session, weights_digest
from verifier_svc.backends.pass_timing import prefilled_cache
from verifier_svc.backends.stored_steps import store_key
from verifier_svc.greedy_head import rescored
from verifier_svc.kv_cache import KVCache, kv_shape
from verifier_svc.token_tree import chain

if TYPE_CHECKING:
    from verifier_svc.target_model import TargetModel

log = logging.getLogger(__name__)

# The most tokens a pass sends through the graph. Prompts too: a prefill of 32, 128 and 400 tokens
# took 69, 170 and 507 ms here against torch's 124, 218 and 513
# (bench/results/onnx_fused_attention_probe.py). Larger passes run in torch: the attention node
# holds every head's probabilities (heads x n x (L + n) floats).
MAX_TOKENS = 512
HIDDEN = torch.finfo(torch.float32).min
# Argmax-only passes of up to this many rows skip the graph's float32 head for its int8-bounded
# one: its nodes took 0.5, 1.5, 2.1, 3.7 and 6.5 ms for 1, 2, 4, 8 and 16 rows, the float32 head
# 2.6, 3.1, 3.2, 4.2 and 5.7 (docs/design/greedy-head.md).
GREEDY_ROWS = 4
NO_ROWS = np.zeros(0, np.int64)


class OnnxPasses:
    """The served model's step as an onnxruntime session on `threads` threads, its optimized graph
    kept in `store` (None: made at every start)."""

    def __init__(self, model: torch.nn.Module, threads: int, store: Path | None = None) -> None:
        import onnxruntime as ort

        began = time.perf_counter()
        # Its threads spin within a pass, as torch's OpenMP threads do between ops, and park
        # between passes (specdec/onnx_threads.py).
        options = session_options(threads)
        folder = None if store is None else store / store_key(model, {"onnxruntime": ort.__version__, "graph": graph_digest(), "weights": weights_digest(model)})
        self.folder = folder  # where the optimized step is kept (None: nowhere)
        stored = None if folder is None else stored_session(folder, options)
        if stored is not None:
            self.session, made = stored, f"read from {folder}"
        else:
            self.session = exported_session(model, options, folder)
            made = f"exported{'' if folder is None else f', kept in {folder}'}"
        self.inputs, self.outputs = rows_io_names(model.config.num_hidden_layers)
        self.vocab_size: int = model.config.vocab_size
        self.hidden_size: int = model.config.hidden_size
        # Whether argmax-only passes take the int8-bounded head (cpu.py's start-up check turns it
        # off where it disagrees with the model's forward), and the float32 head its candidates
        # are scored from.
        self.greedy = True
        self.head = model.lm_head.weight.detach().numpy()
        self.greedy_runs = 0  # passes that took it
        self.max_positions: int = model.config.max_position_embeddings
        heads, head_dim = kv_shape(model.config)
        self._no_entries = torch.empty(1, heads, 0, head_dim)  # a new session's layers take their shape
        self.runs = 0  # passes run here
        # Per cache, its IOBinding and the buffers' addresses and sizes it binds.
        self._bindings: weakref.WeakKeyDictionary[KVCache, tuple[tuple[tuple[int, int], ...], object]] = weakref.WeakKeyDictionary()
        log.info("onnxruntime lone passes ready in %.1f s (%s; onnxruntime %s)", time.perf_counter() - began, made, ort.__version__)

    def engine(self) -> str:
        """What these passes are, for ModelInfo.engine."""
        greedy = f"; the argmax of greedy passes of up to {GREEDY_ROWS} rows from an int8-bounded head" if self.greedy else ""
        return f"lone passes of up to {MAX_TOKENS} tokens through onnxruntime, the rest in torch{greedy}"

    def fits(self, cache: KVCache, start: int, real: int) -> bool:
        """Whether a lone pass of `real` tokens after `start` cached ones runs here: of up to
        MAX_TOKENS, at positions within the graph's rotary tables (the sessions' context length
        keeps them there; a pass past them would read past the tables)."""
        return real <= MAX_TOKENS and start + real <= self.max_positions

    def score(
        self, cache: KVCache, ids: Sequence[int], positions: torch.Tensor, mask: torch.Tensor, start: int, first_row: int,
        argmax_only: bool = False,
    ) -> torch.Tensor:
        """The pass of `ids` at `positions` ([r] after `start` cached entries, mask [r, start + r]
        bool: tree_attention_mask): [r - first_row, vocab] float32 logits of its rows from
        `first_row` on; the r new entries written into the cache's buffers in place. A session's
        first pass, its prompt with a tree after it, runs as two (drafter_svc/draft_cache.prompt_rows).
        `argmax_only`: a row may hold -inf for tokens that cannot be its argmax (greedy_head.rescored)."""
        split = prompt_rows(start, positions.numpy())
        if split == len(ids):
            return self._run(cache, ids, positions, mask, start, first_row, argmax_only)
        head = min(first_row, split - 1)  # the first pass returns a row at least
        prompt = self._run(cache, ids[:split], positions[:split], mask[:split, :split], start, head, argmax_only)
        tree = self._run(cache, ids[split:], positions[split:], mask[split:], start + split, max(first_row - split, 0), argmax_only)
        return torch.cat([prompt[first_row - head :], tree])

    def _run(
        self, cache: KVCache, ids: Sequence[int], positions: torch.Tensor, mask: torch.Tensor, start: int, first_row: int, argmax_only: bool,
    ) -> torch.Tensor:
        """`score` as one run of the graph."""
        layers = cache.cache.layers
        real = len(ids)
        for layer in layers:  # room for the pass's entries (a new session's layers: buffers of the graph's shape)
            if not layer.is_initialized:
                layer.lazy_initialization(self._no_entries, self._no_entries)
            layer.reserve(start + real, self._no_entries)
        binding = self._cache_binding(cache)
        binding.bind_cpu_input("input_ids", np.asarray([ids], np.int64))
        binding.bind_cpu_input("position_ids", positions.numpy().astype(np.int64)[None])
        binding.bind_cpu_input("attention_bias", torch.where(mask, 0.0, HIDDEN).numpy()[None, None])
        binding.bind_cpu_input("seqlens_k", np.asarray([start + real - 1], np.int32))
        binding.bind_cpu_input("total_length", np.asarray(start + real, np.int32))
        rows = np.arange(first_row, real, dtype=np.int64)
        if not (self.greedy and argmax_only and len(rows) <= GREEDY_ROWS):
            binding.bind_cpu_input("logits_index", rows)
            binding.bind_cpu_input("rows_index", NO_ROWS)
            logits = torch.empty(1, len(rows), self.vocab_size)
            binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.data_ptr())
            for unread in ("rows", CANDIDATES):  # empty (onnxruntime allocates them)
                binding.bind_output(unread, "cpu")
            self._run_binding(binding, cache, start + real)
            return logits[0]
        # The final norm's rows and their candidates instead of logits (greedy_head.py).
        binding.bind_cpu_input("logits_index", NO_ROWS)
        binding.bind_cpu_input("rows_index", rows)
        hidden = np.empty((1, len(rows), self.hidden_size), np.float32)
        candidates = np.empty((len(rows), self.vocab_size), np.bool_)
        binding.bind_output("rows", "cpu", 0, np.float32, list(hidden.shape), hidden.ctypes.data)
        binding.bind_output(CANDIDATES, "cpu", 0, np.bool_, list(candidates.shape), candidates.ctypes.data)
        binding.bind_output("logits", "cpu")
        self._run_binding(binding, cache, start + real)
        self.greedy_runs += 1
        return rescored(self.head, hidden[0], candidates)

    def check_greedy(self, target: TargetModel, context_tokens: int, expected: torch.Tensor, tolerance: float) -> None:
        """Turn the int8-bounded head off (a warning) where a greedy pass of token 5 after
        `context_tokens` of token 1 disagrees with the model's forward's logits `expected` [vocab]
        there: another argmax, or a kept logit more than `tolerance` off."""
        greedy = target.score(prefilled_cache(target, context_tokens), [5], chain([]), argmax_only=True)[0]
        kept = torch.isfinite(greedy)
        if greedy.argmax() != expected.argmax() or not (greedy[kept] - expected[kept]).abs().max().item() <= tolerance:
            log.warning("the int8-bounded greedy head off: its argmax or logits differ from the model's forward")
            self.greedy = False

    def _run_binding(self, binding, cache: KVCache, end: int) -> None:  # type: ignore[no-untyped-def]
        self.session.run_with_iobinding(binding)
        self.runs += 1
        cache.written_to(end)

    @contextlib.contextmanager
    def profiling(self, prefix: Path) -> Iterator[Callable[[], str]]:
        """Within it, passes run on a second session of the kept step with onnxruntime's profiler
        on (its files named from `prefix`); yields a function that ends the profile and returns
        its JSON file's path. For the engine benchmark's breakdown (bench/engine_parts.py)."""
        import onnxruntime as ort

        if self.folder is None:
            raise ValueError("onnxruntime's passes keep no step to profile (no store)")
        options = session_options(self.session.get_session_options().intra_op_num_threads)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimized when kept
        options.enable_profiling, options.profile_file_prefix = True, str(prefix)
        served, self.session = self.session, ort.InferenceSession(str(self.folder / STEP_FILE), options, providers=["CPUExecutionProvider"])
        self._bindings = weakref.WeakKeyDictionary()  # bound to the served session
        try:
            yield self.session.end_profiling
        finally:
            self.session, self._bindings = served, weakref.WeakKeyDictionary()

    def _cache_binding(self, cache: KVCache):  # type: ignore[no-untyped-def]
        """An IOBinding with the cache's buffers bound as the graph's cache inputs and, at the
        same addresses, its present outputs: the one made for this cache before, while its
        buffers are the same (they change only as they grow; a grown buffer may land where an
        earlier one was, so their sizes are compared too)."""
        buffers = [buffer for layer in cache.cache.layers for buffer in layer.buffers()]  # type: ignore[union-attr]
        addresses = tuple((buffer.data_ptr(), buffer.shape[-2]) for buffer in buffers)
        kept = self._bindings.get(cache)
        if kept is not None and kept[0] == addresses:
            return kept[1]
        binding = self.session.io_binding()
        for name, present, buffer in zip(self.inputs[7:], self.outputs[1:-1], buffers):
            binding.bind_input(name, "cpu", 0, np.float32, list(buffer.shape), buffer.data_ptr())
            binding.bind_output(present, "cpu", 0, np.float32, list(buffer.shape), buffer.data_ptr())
        self._bindings[cache] = (addresses, binding)
        return binding


def served_layout(model: torch.nn.Module) -> bool:
    """Whether the graph computes `model`'s step: exactly transformers' LlamaForCausalLM (no
    sliding windows, no logit scaling, rotary tables that do not change with the length) in
    float32."""
    return is_llama_layout(model) and next(model.parameters()).dtype == torch.float32


def unserved_log(model: torch.nn.Module) -> tuple[int, str]:
    """The level and line the CPU backend logs for a model these passes do not serve: a warning
    where only its dtype keeps it out (a one-token bfloat16 pass in torch took 2.4x float32's
    through onnxruntime on the 2-core AVX-512 BF16 host: docs/benchmarks.md, 2026-12-02)."""
    line = f"onnxruntime lone passes: not for this model ({type(model).__name__}, {next(model.parameters()).dtype}): its passes run in torch"
    if is_llama_layout(model):
        return logging.WARNING, line + ", slower than --dtype float32 on a CPU without AMX (docs/usage/models.md)"
    return logging.INFO, line


def missing_modules() -> list[str]:
    """The modules these passes need that are not installed (onnxruntime runs them, torch's exporter
    writes the graph with onnx); the verifier then serves without them."""
    return [name for name in ("onnxruntime", "onnx") if not importable(name)]

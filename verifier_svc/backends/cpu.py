"""The CPU backend: weight-first linear layers (one-row products from one-row copies, in
bfloat16 products of several rows from float32 copies, and in float32 products of several rows
from oneDNN copies, where memory allows and tuning finds they pay), grouped attention
read in place, padding of float32 batched passes through F.linear, pass sizes tuned at start
(cpu_tuning.py), and, where asked, lone passes as compiled static passes (cpu_compiled.py) or
through onnxruntime (onnx_passes.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from verifier_svc.attention import GROUPED_SDPA, sdpa_or_eager
from verifier_svc.backends.compiled_layers import CompiledLayers
from verifier_svc.backends.cpu_compiled import CompiledPassRunner, compiled_layers
from verifier_svc.backends.cpu_tuning import BFLOAT16_ONEDNN_ROWS, ONEDNN_ROWS, keep_copies, onednn_rows_from, tune_batched_layout, tune_pass_sizes
from verifier_svc.backends.generic import GenericBackend
from verifier_svc.backends.onnx_passes import OnnxPasses, missing_modules, served_layout, unserved_log
from verifier_svc.backends.onnx_step_store import default_store
from verifier_svc.backends.pass_timing import lone_sizes_seconds, prefilled_cache
from verifier_svc.backends.stored_steps import StoredSteps
from verifier_svc.kv_cache import KVCache
from verifier_svc.layer_masks import layer_windows
from verifier_svc.linear_layout import (
    FLOAT32_MIN_ROWS, drop_float32_copies, drop_one_row_copies, drop_onednn_copies, float32_copies, linear_switch, one_row_copies,
    onednn_copies, onednn_dtype_ready, switchable_layers,
)
from verifier_svc.static_pass import SlotPasses, StaticPass
from verifier_svc.token_tree import chain

if TYPE_CHECKING:
    from verifier_svc.backends.base import LonePass
    from verifier_svc.target_model import TargetModel

log = logging.getLogger(__name__)

# F.linear runs matrix products with 2 or 3 rows 2-3x slower than with 4 (measured with torch
# 2.13's MKL on a 2-core AMD EPYC: the model's linear layers take 10 ms for 1 row, 23 ms for 2,
# 34 ms for 3, 17 ms for 4), so a target whose passes run through it (where tuning timed it
# faster than weight first: linear_layout.py) pads a batched pass to this many rows. Weight
# first, as a CPU target runs until tuned, nothing is padded; nor in bfloat16 or float16, whose
# products cost in proportion to their rows (1 row 27.5 ms, 2 rows 41.4, 4 rows 73-75 from the
# float32 copies or not: docs/design/float32-copies.md), so padding 2 rows to 4 would slow them.
# Where onnxruntime takes the lone passes, tuning times torch's batched rows and pads only where
# that measures faster (cpu_tuning.tune_batched_layout; on a 2-core Intel host of 2026-11-28
# F.linear ran 2 rows about as fast as 1, and weight first twice as slow).
CPU_MIN_PASS_TOKENS = 4
PADDED_DTYPES = (torch.float32,)
# With compiled passes: sessions whose lone passes run compiled (later ones run eagerly until a
# slot frees), the entries a slot holds (a session past them runs eagerly), the pass sizes
# compiled (a lone round of r tokens runs as the smallest size >= r; larger ones run eagerly;
# one-token passes too where one-row copies exist: eagerly they read them faster than compiled,
# docs/design/cpu-engine.md) and the fewest keys a static pass reads (static_pass.key_lengths).
COMPILED_SLOTS = 4
COMPILED_CONTEXT = 4096
COMPILED_SIZES = (1, 2, 4, 8)
COMPILED_MIN_KEYS = 512
# The attention implementations a static pass runs with (the model's own code over a slot).
STATIC_ATTENTION = (GROUPED_SDPA, "sdpa", "eager")
# One-row copies (linear_layout.py) are made for these weights only (bfloat16 ones ran 12x slower
# than F.linear), float32 copies for the narrow ones; either only while the memory left after them
# stays at least COPIES_MEMORY_LEFT of the memory available before: the KV caches need the rest.
ONE_ROW_DTYPES = (torch.float32,)
FLOAT32_COPY_DTYPES = (torch.bfloat16, torch.float16)
COPIES_MEMORY_LEFT = 0.5
# onnxruntime's step is checked at start on a prompt of this many tokens and a 4-token pass after
# it, against the model's forward: float rounding moved the default model's logits (up to ~28) by
# 5e-5 to 2.4e-3 on the CPUs measured (the order of the sums differs: 2026-11-28, an AMD EPYC);
# a wrong mask, position or layer moves them by whole units.
ONNX_CHECK_TOKENS = 32
ONNX_CHECK_RTOL = 1e-3


def available_memory_bytes() -> int | None:
    """The memory this process may still take: MemAvailable of /proc/meminfo, and no more than
    its cgroup's limit less its use (a container's limit, where cgroup v2 sets one); None where
    the machine does not say."""
    available = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max" and available is not None:
            available = min(available, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    return available


def linear_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's nn.Linear weights, each shared weight once."""
    weights = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return sum(w.numel() * w.element_size() for w in weights.values())


class CpuBackend(GenericBackend):
    """The model's nn.Linear layers made switchable (linear_layout.py); weight first until tuning
    times F.linear faster; with `one_row`, one-row copies of their weights (float32, where memory
    allows) for one-token passes, and with `float32_rows`, float32 copies of bfloat16 or float16
    weights for products of 4 rows or more, each until tuning times them no faster (untuned, or
    with compiled passes, they stay as made). With `onednn` (no compiled passes), tuning makes
    oneDNN copies of float32 or bfloat16 weights (onednn_ready) and sets the rows from which
    products read them, freeing them where none pays. With `compiled_passes`, a lone pass of a
    session in a slot (not a one-token pass with one-row copies) runs as a static pass, its layers
    compiled (cpu_compiled.py), weight first, their code kept in `compiled_store` (None: this
    process only); tuning only times. With `onnx_passes` (not `compiled_passes`), a float32 Llama's
    lone passes of a few tokens run through onnxruntime (onnx_passes.py); tuning chooses torch's
    layout for the batched passes left to it and times the lone ones."""

    kind = "cpu"

    def __init__(
        self, model: torch.nn.Module, compiled_passes: bool = False, one_row: bool = True, compiled_store: Path | None = None,
        float32_rows: bool = True, onnx_passes: bool = False, onednn: bool = True,
    ) -> None:
        super().__init__(model)
        self.linear_switch = linear_switch(model)
        self.weight_first = True
        self.linear_min_rows = CPU_MIN_PASS_TOKENS  # rows a pass through F.linear is padded to (float32)
        self.one_row = self.float32_rows = False
        self.onednn = onednn  # whether tuning may make oneDNN copies
        self.onednn_min_rows = 0  # products of this many rows or more read oneDNN copies (0: none), from tuning
        self.dtype = next(model.parameters()).dtype
        self.onnx: OnnxPasses | None = None
        self.onnx_off = ""  # why onnxruntime's passes, asked for and fit for the model, are off (engine())
        missing = onnx_passes and missing_modules()
        if onnx_passes and compiled_passes:  # asked for by name: they take the lone passes
            log.info("onnxruntime lone passes: off with compiled passes")
        elif missing:
            log.info("onnxruntime lone passes: %s not installed (pip install 'specdec[verifier]'): passes run in torch", ", ".join(missing))
            self.onnx_off = f"{', '.join(missing)} not installed"
        elif onnx_passes and not served_layout(model):
            log.log(*unserved_log(model))
        elif onnx_passes and self._room_for("onnxruntime", 2 * linear_weight_bytes(model)):
            self.onnx = OnnxPasses(model, torch.get_num_threads(), default_store())
        drop_one_row_copies(model)  # another backend's, over the same model object
        drop_float32_copies(model)
        drop_onednn_copies(model)
        if one_row and self.onnx is None and self.dtype in ONE_ROW_DTYPES and self._room_for("one-row", linear_weight_bytes(model)):
            self.one_row = one_row_copies(model, torch.get_num_threads()) > 0
        if float32_rows and self.dtype in FLOAT32_COPY_DTYPES and self._room_for("float32", 4 // self.dtype.itemsize * linear_weight_bytes(model)):
            self.float32_rows = float32_copies(model) > 0
        self.compiled: CompiledLayers | None = None
        if compiled_passes and model.config._attn_implementation in STATIC_ATTENTION:
            self.compiled = compiled_layers(model, compiled_store)
            capacity = min(model.config.max_position_embeddings, COMPILED_CONTEXT)
            sizes = [size for size in COMPILED_SIZES if size > 1 or not self.one_row]
            self.passes = SlotPasses(model, layer_windows(model.config), COMPILED_SLOTS, capacity, sizes, self._compile, COMPILED_MIN_KEYS)

    @staticmethod
    def _room_for(copies: str, needed: int) -> bool:
        """Whether `needed` bytes of weight copies leave COPIES_MEMORY_LEFT of the memory free."""
        available = available_memory_bytes()
        room = available is not None and available - needed >= COPIES_MEMORY_LEFT * available
        log.info("%s weight copies: %d MB%s", copies, needed >> 20, "" if room else f" do not fit in {available and available >> 20} MB: none")
        return room

    def _drop_one_row_copies(self) -> None:
        self.one_row = False
        drop_one_row_copies(self.model)

    def _drop_float32_copies(self) -> None:
        self.float32_rows = False
        drop_float32_copies(self.model)

    def _compile(self, static: StaticPass) -> CompiledPassRunner:
        assert self.compiled is not None
        with self.kernels(), torch.inference_mode():
            return CompiledPassRunner(static, self.compiled)

    @staticmethod
    def attention_implementation(config: PretrainedConfig) -> str:
        """GROUPED_SDPA where the model's class runs SDPA (attention.py), else `eager`."""
        sdpa = sdpa_or_eager(config)
        return GROUPED_SDPA if sdpa == "sdpa" else sdpa

    @property
    def min_pass_tokens(self) -> int:
        return 1 if self.weight_first or self.dtype not in PADDED_DTYPES else self.linear_min_rows

    def kernels(self) -> contextlib.AbstractContextManager:
        return self.linear_switch.set(self.weight_first, self.one_row, self.float32_rows, self.onednn_min_rows)

    def engine(self) -> str:
        if self.onnx is not None:
            lone = self.onnx.engine()
        elif self.passes is not None:
            lone = f"lone passes of sessions in {len(self.passes.slots)} slots compiled, the rest in torch"
        else:
            lone = "every pass in torch" + (f" (onnxruntime's passes off: {self.onnx_off})" if self.onnx_off else "")
        rows = self.min_pass_tokens
        copies = [name for name, kept in (("one-row", self.one_row), ("float32", self.float32_rows)) if kept]
        return "; ".join([
            f"{super().engine()}, {str(self.dtype).removeprefix('torch.')}", lone,
            f"torch's linear layers {'weight first' if self.weight_first else 'F.linear'}" + (f", padded to {rows} rows" if rows > 1 else ""),
            *([f"{' and '.join(copies)} weight copies"] if copies else []),
            *([f"oneDNN weight copies from {self.onednn_min_rows} rows"] if self.onednn_min_rows else []),
        ])

    def lone_pass(self, cache: KVCache, start: int, real: int) -> LonePass | None:
        """onnxruntime's step where it runs the pass; else None (an eager pass) for fewer tokens
        than the smallest static size: a one-token pass where one-row copies exist
        (COMPILED_SIZES); otherwise the slot's static pass."""
        if self.onnx is not None and self.onnx.fits(cache, start, real):
            return self.onnx
        if self.passes is not None and real < self.passes.sizes[0]:
            return None
        return super().lone_pass(cache, start, real)

    def pass_counts(self) -> tuple[int, int]:
        return (CompiledPassRunner.made, CompiledPassRunner.runs) if self.passes else (0, 0)

    def prepare(self, target: TargetModel) -> None:
        """With compiled passes: compile every slot's pass of every shape (a few compiles cover
        them all: cpu_compiled.py), or read them from the store, before the verifier serves.
        With onnxruntime passes: check one against the model's own forward, and serve without
        them (a warning) where it differs by more than float rounding."""
        if self.onnx is not None:
            self._check_onnx(target)
        if self.passes is not None and self.compiled is not None:
            began = time.perf_counter()
            self.passes.prepare()
            steps = self.compiled.step
            assert isinstance(steps, StoredSteps)
            log.info(
                "%d compiled CPU passes ready in %.1f s (%d compiled, %d read from %s)", len(self.passes.runners),
                time.perf_counter() - began, steps.compiled, steps.loaded, steps.folder or "no store",
            )

    @contextlib.contextmanager
    def _passes_in_torch(self) -> Iterator[None]:
        """Every pass in torch while inside (onnxruntime's set aside, then put back)."""
        onnx, self.onnx = self.onnx, None
        try:
            yield
        finally:
            self.onnx = onnx

    @torch.inference_mode()
    def _check_onnx(self, target: TargetModel) -> None:
        # The reference is the model's own forward over the whole sequence (transformers' code,
        # F.linear), not a torch pass of this backend's: the weight-first layout rounds otherwise.
        ids = [1] * ONNX_CHECK_TOKENS + [5, 6, 7, 8]
        expected = self.model(torch.tensor([ids], device=self.model.device)).logits[0, -4:].float()
        cache = prefilled_cache(target, ONNX_CHECK_TOKENS)  # its prompt through onnxruntime too
        onnx = self.onnx
        assert onnx is not None and onnx.fits(cache, ONNX_CHECK_TOKENS, 4)
        difference = (target.score(cache, [5], chain([6, 7, 8])) - expected).abs().max().item()
        if not difference <= (tolerance := ONNX_CHECK_RTOL * max(1.0, expected.abs().max().item())):
            log.warning("onnxruntime lone passes off: their logits differ from the model's forward by %.3g", difference)
            self.onnx, self.onnx_off = None, f"their logits differed from the model's forward by {difference:.3g} at start"
        elif onnx.greedy:  # and a greedy one-token pass
            onnx.check_greedy(target, ONNX_CHECK_TOKENS, expected[0], tolerance)

    def _tune_onednn(self, target: TargetModel, cache: KVCache, context_tokens: int) -> None:
        """oneDNN weight copies where weights and memory allow, read from the rows tuning finds they
        pay (cpu_tuning.onednn_rows_from); freed where none pays, the float32 copies where they take all theirs."""
        self.onednn_min_rows = 0
        if self.onednn and onednn_dtype_ready(self.dtype) and self._room_for("oneDNN", linear_weight_bytes(self.model)) and onednn_copies(self.model):
            onednn_rows_from(target, self, cache, context_tokens, judged=ONEDNN_ROWS if self.dtype == torch.float32 else BFLOAT16_ONEDNN_ROWS)
        if not self.onednn_min_rows:
            drop_onednn_copies(self.model)
        elif self.onednn_min_rows <= FLOAT32_MIN_ROWS:
            self._drop_float32_copies()

    @torch.inference_mode()
    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        if self.passes is None and self.onnx is None:
            cache = prefilled_cache(target, context_tokens)  # one prefill for all the timing
            if self.one_row and not keep_copies(target, self, "one_row", cache, context_tokens):
                self._drop_one_row_copies()
            if self.float32_rows and not keep_copies(target, self, "float32_rows", cache, context_tokens):
                self._drop_float32_copies()
            # No layer to switch (int8 weights: int8_weights.py): both layouts are one pass, timed once.
            layouts = (True, False) if switchable_layers(self.model) else (True,)
            self._tune_onednn(target, cache, context_tokens)
            seconds = tune_pass_sizes(target, self, cache, context_tokens, max_tokens, repeats, layouts=layouts)
            if self.one_row and not self.weight_first:  # F.linear reads no copy
                self._drop_one_row_copies()
            return seconds
        cache = prefilled_cache(target, context_tokens)  # one prefill for all the timing
        if self.onnx is not None and switchable_layers(self.model):
            # torch's passes are now batched ones: its layout is chosen for them.
            with self._passes_in_torch():
                self.linear_min_rows = tune_batched_layout(target, self, cache, context_tokens, CPU_MIN_PASS_TOKENS)
                self._tune_onednn(target, cache, context_tokens)
            rows = self.min_pass_tokens
            log.info("torch's passes (batched): %s, %s", "weight first" if self.weight_first else "F.linear", f"padded to {rows} rows" if rows > 1 else "unpadded")
        # Compiled passes are weight first and pad to their own sizes, onnxruntime's take the
        # tokens they are given: time them, pad nothing more.
        seconds = lone_sizes_seconds(target, context_tokens, max_tokens, repeats, cache)
        target.pass_tokens, target.pass_seconds, target.pass_context_tokens = [1], seconds, context_tokens
        return seconds

"""The CUDA backend: SDPA without cuDNN's attention; lone passes replayed as CUDA graphs, recorded
with the model's decoder layers compiled."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from verifier_svc.backends.compiled_blocks import CompiledBlocks
from verifier_svc.backends.compiled_layers import CompiledLayers
from verifier_svc.backends.cuda_graphs import GraphRunner
from verifier_svc.backends.generic import GenericBackend
from verifier_svc.backends.pass_timing import lone_sizes_seconds
from verifier_svc.layer_masks import layer_windows
from verifier_svc.static_pass import SlotPasses, StaticPass

if TYPE_CHECKING:
    from verifier_svc.target_model import TargetModel

log = logging.getLogger(__name__)

# The attention kernels a pass may use: not cuDNN's. With a mask in bfloat16, torch 2.11 picks
# cuDNN's attention, which builds an execution plan for every new shape, and nearly every pass
# has a new one (the key length grows each round; batches vary). Measured on an H100
# (SmolLM2-135M, one-token rounds): 95 ms per round at new key lengths, 32 ms at lengths seen
# before; without cuDNN (the memory-efficient kernel) 45 ms either way. float32 never used it.
CUDA_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
# Sessions whose lone passes replay graphs (later ones run eagerly until a slot frees), the
# entries each slot holds (a session past them runs eagerly) and the pass sizes recorded (a
# lone round of r tokens replays the smallest size >= r; larger ones, prefills, run eagerly).
# Padding is nearly free on a GPU (an H200 ran SmolLM2-135M passes of 1-16 tokens within 10% of
# each other), so few sizes: each is recorded per slot and per key length (static_pass.py).
GRAPH_SLOTS = 8
GRAPH_CONTEXT = 4096
GRAPH_SIZES = (1, 4, 16, 64)
# What runs compiled inside the recorded passes (--cuda-compiled): whole decoder layers
# (compiled_layers.py), the norms and MLPs only (compiled_blocks.py), or nothing (the model as
# written). docs/design/cuda-graphs.md has their timings.
COMPILED: dict[str, type[CompiledLayers] | type[CompiledBlocks] | None] = {
    "layers": CompiledLayers, "blocks": CompiledBlocks, "none": None,
}


def compiled_error(compiled: str) -> str | None:
    """Why --cuda-compiled cannot be `compiled` (None: it can)."""
    return None if compiled in COMPILED else f"{compiled!r} is not one of {', '.join(COMPILED)}"


def recordable(model: torch.nn.Module) -> bool:
    """Whether the model's forward can be recorded: on one device, with SDPA or eager attention."""
    devices = set((getattr(model, "hf_device_map", None) or {}).values())
    return len(devices) <= 1 and model.config._attn_implementation in ("sdpa", "eager")


class CudaBackend(GenericBackend):
    """transformers' SDPA limited to CUDA_ATTENTION_BACKENDS for the span of each pass; a lone
    pass of a session in a graph slot replays a recorded graph (static_pass.py), recorded with
    the parts of the model `compiled` names (COMPILED) compiled."""

    kind = "cuda"

    def __init__(self, model: torch.nn.Module, graphs: bool = True, compiled: str = "layers") -> None:
        super().__init__(model)
        error = compiled_error(compiled)
        if error:
            raise ValueError(f"compiled: {error}")
        self.compiled: CompiledLayers | CompiledBlocks | None = None  # run compiled while recording
        if graphs and recordable(model):
            kind = COMPILED[compiled]
            self.compiled = kind(model) if kind else None
            capacity = min(model.config.max_position_embeddings, GRAPH_CONTEXT)
            self.passes = SlotPasses(model, layer_windows(model.config), GRAPH_SLOTS, capacity, GRAPH_SIZES, self._record)
        self.graph_seconds = 0.0  # spent recording graphs
        self.graph_pool: tuple[int, int] | None = None  # the memory pool of this model's graphs

    def _record(self, static: StaticPass) -> GraphRunner:
        began = time.perf_counter()
        with self.kernels(), torch.inference_mode(), self.compiled.active() if self.compiled else contextlib.nullcontext():
            if self.graph_pool is None:
                self.graph_pool = torch.cuda.graph_pool_handle()
            runner = GraphRunner(static, self.graph_pool)
        self.graph_seconds += time.perf_counter() - began
        return runner

    def kernels(self) -> contextlib.AbstractContextManager:
        # sdpa_kernel sets process-wide flags until the pass ends: passes run on one thread.
        return sdpa_kernel(CUDA_ATTENTION_BACKENDS)

    def pass_counts(self) -> tuple[int, int]:
        return GraphRunner.recorded, GraphRunner.replays

    def engine(self) -> str:
        if self.passes is None:
            return f"{super().engine()}; no CUDA graphs"
        compiled = f", {type(self.compiled).__name__}" if self.compiled else ""
        return f"{super().engine()}; lone passes of sessions in {len(self.passes.slots)} slots replay CUDA graphs{compiled}"

    def prepare(self, target: TargetModel) -> None:
        """Record every slot's graph of every shape (slots x sizes x key lengths: 160)."""
        if self.passes is not None:
            self.passes.prepare()
            compiled = self.compiled.count if self.compiled else 0
            log.info("%d CUDA graphs recorded in %.1f s (%d modules compiled)", len(self.passes.runners), self.graph_seconds, compiled)

    @torch.inference_mode()
    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        """Time lone passes of 1..max_tokens tokens (each the minimum of `repeats`) as
        target.pass_seconds: what the drafters price their drafts by. Nothing is padded."""
        if self.passes is None:
            return []
        seconds = lone_sizes_seconds(target, context_tokens, max_tokens, repeats)
        target.pass_seconds, target.pass_context_tokens = seconds, context_tokens
        return seconds

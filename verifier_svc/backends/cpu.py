"""The CPU backend: weight-first linear layers, grouped attention read in place, padding of
batched passes through F.linear, pass sizes tuned at start (cpu_tuning.py), and, where asked,
lone passes as compiled static passes (cpu_compiled.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from verifier_svc.attention import GROUPED_SDPA, sdpa_or_eager
from verifier_svc.backends.compiled_layers import CompiledLayers
from verifier_svc.backends.cpu_compiled import CompiledPassRunner, compiled_layers, compiles
from verifier_svc.backends.cpu_tuning import tune_pass_sizes
from verifier_svc.backends.generic import GenericBackend
from verifier_svc.backends.pass_timing import lone_sizes_seconds
from verifier_svc.layer_masks import layer_windows
from verifier_svc.linear_layout import linear_switch
from verifier_svc.static_pass import SlotPasses, StaticPass

if TYPE_CHECKING:
    from verifier_svc.target_model import TargetModel

log = logging.getLogger(__name__)

# F.linear runs matrix products with 2 or 3 rows 2-3x slower than with 4 (measured with torch
# 2.13's MKL on a 2-core AMD EPYC: the model's linear layers take 10 ms for 1 row, 23 ms for 2,
# 34 ms for 3, 17 ms for 4), so a target whose passes run through it (where tuning timed it
# faster than weight first: linear_layout.py) pads a batched pass to this many rows. Weight
# first, as a CPU target runs until tuned, nothing is padded.
CPU_MIN_PASS_TOKENS = 4
# With compiled passes: sessions whose lone passes run compiled (later ones run eagerly until a
# slot frees), the entries a slot holds (a session past them runs eagerly), the pass sizes
# compiled (a lone round of r tokens runs as the smallest size >= r; larger ones run eagerly)
# and the fewest keys a static pass reads (static_pass.key_lengths).
COMPILED_SLOTS = 4
COMPILED_CONTEXT = 4096
COMPILED_SIZES = (1, 2, 4, 8)
COMPILED_MIN_KEYS = 512
# The attention implementations a static pass runs with (the model's own code over a slot).
STATIC_ATTENTION = (GROUPED_SDPA, "sdpa", "eager")


class CpuBackend(GenericBackend):
    """The model's nn.Linear layers made switchable (linear_layout.py); weight first until
    tuning times F.linear faster. With `compiled_passes`, a lone pass of a session in a slot
    runs as a static pass with its layers compiled (cpu_compiled.py), weight first, and tuning
    only times."""

    kind = "cpu"

    def __init__(self, model: torch.nn.Module, compiled_passes: bool = False) -> None:
        super().__init__(model)
        self.linear_switch = linear_switch(model)
        self.weight_first = True
        self.compiled: CompiledLayers | None = None
        if compiled_passes and model.config._attn_implementation in STATIC_ATTENTION:
            self.compiled = compiled_layers(model)
            capacity = min(model.config.max_position_embeddings, COMPILED_CONTEXT)
            self.passes = SlotPasses(
                model, layer_windows(model.config), COMPILED_SLOTS, capacity, COMPILED_SIZES, self._compile, COMPILED_MIN_KEYS
            )

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
        return 1 if self.weight_first else CPU_MIN_PASS_TOKENS

    def kernels(self) -> contextlib.AbstractContextManager:
        return self.linear_switch.set(self.weight_first)

    def pass_counts(self) -> tuple[int, int]:
        return (CompiledPassRunner.made, CompiledPassRunner.runs) if self.passes else (0, 0)

    def prepare(self, target: TargetModel) -> None:
        """With compiled passes: compile every slot's pass of every shape (a few compiles cover
        them all: cpu_compiled.py), before the verifier serves."""
        if self.passes is not None:
            began = time.perf_counter()
            self.passes.prepare()
            log.info("%d compiled CPU passes ready in %.1f s (%d compiles)", len(self.passes.runners), time.perf_counter() - began, compiles())

    @torch.inference_mode()
    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        if self.passes is None:
            return tune_pass_sizes(target, self, context_tokens, max_tokens, repeats)
        # Compiled passes are weight first and pad to their own sizes: time them, pad nothing more.
        seconds = lone_sizes_seconds(target, context_tokens, max_tokens, repeats)
        target.pass_tokens, target.pass_seconds, target.pass_context_tokens = [1], seconds, context_tokens
        return seconds

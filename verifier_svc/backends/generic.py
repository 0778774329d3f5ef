"""Devices without a backend of their own (mps, xpu): transformers' SDPA, nothing padded or tuned."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from verifier_svc.attention import sdpa_or_eager
from verifier_svc.kv_cache import KVCache
from verifier_svc.static_pass import StaticLonePass

if TYPE_CHECKING:
    from verifier_svc.backends.base import LonePass
    from verifier_svc.static_pass import SlotPasses
    from verifier_svc.target_model import TargetModel


class GenericBackend:
    """The model's forward as transformers runs it. A backend that runs lone passes of fixed
    shapes sets `passes` (static_pass.SlotPasses): sessions then get their caches in its slots,
    and a lone pass that fits runs through its runner."""

    kind = "generic"
    min_pass_tokens = 1

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.passes: SlotPasses | None = None

    @staticmethod
    def attention_implementation(config: PretrainedConfig) -> str:
        return sdpa_or_eager(config)

    def kernels(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def new_cache(self) -> KVCache:
        return self.passes.new_cache() if self.passes else KVCache(self.model.config)

    def lone_pass(self, cache: KVCache, start: int, real: int) -> LonePass | None:
        runner = self.passes.runner(cache, start, real) if self.passes else None
        return None if runner is None else StaticLonePass(runner)

    def pass_counts(self) -> tuple[int, int]:
        return 0, 0

    def engine(self) -> str:
        return f"{self.kind}: torch, {self.model.config._attn_implementation} attention"

    def prepare(self, target: TargetModel) -> None:
        return None

    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        return []

"""Devices without a backend of their own (mps, xpu): transformers' SDPA, nothing padded or tuned."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from verifier_svc.attention import sdpa_or_eager

if TYPE_CHECKING:
    from verifier_svc.target_model import TargetModel


class GenericBackend:
    """The model's forward as transformers runs it."""

    kind = "generic"
    min_pass_tokens = 1

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    @staticmethod
    def attention_implementation(config: PretrainedConfig) -> str:
        return sdpa_or_eager(config)

    def kernels(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        return []

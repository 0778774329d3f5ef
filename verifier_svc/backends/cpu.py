"""The CPU backend: weight-first linear layers, grouped attention read in place, padding of
batched passes through F.linear, and pass sizes tuned at start (cpu_tuning.py)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from transformers import PretrainedConfig

from verifier_svc.attention import GROUPED_SDPA, sdpa_or_eager
from verifier_svc.backends.cpu_tuning import tune_pass_sizes
from verifier_svc.backends.generic import GenericBackend
from verifier_svc.linear_layout import linear_switch

if TYPE_CHECKING:
    from verifier_svc.target_model import TargetModel

# F.linear runs matrix products with 2 or 3 rows 2-3x slower than with 4 (measured with torch
# 2.13's MKL on a 2-core AMD EPYC: the model's linear layers take 10 ms for 1 row, 23 ms for 2,
# 34 ms for 3, 17 ms for 4), so a target whose passes run through it (where tuning timed it
# faster than weight first: linear_layout.py) pads a batched pass to this many rows. Weight
# first, as a CPU target runs until tuned, nothing is padded.
CPU_MIN_PASS_TOKENS = 4


class CpuBackend(GenericBackend):
    """The model's nn.Linear layers made switchable (linear_layout.py); weight first until
    tuning times F.linear faster."""

    kind = "cpu"

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.linear_switch = linear_switch(model)
        self.weight_first = True

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

    def tune(self, target: TargetModel, context_tokens: int, max_tokens: int, repeats: int) -> list[float]:
        return tune_pass_sizes(target, self, context_tokens, max_tokens, repeats)

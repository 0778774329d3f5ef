"""The target's linear layers on CPU: a pass of few rows computes x W^T weight first.

A decoding pass multiplies a few rows x (1 to 16 tokens) by each weight W. On this project's
2-core AMD EPYC, torch 2.13's MKL does that slowly as F.linear computes it: one row goes through
a matrix-vector product that reads the weights at ~12 GB/s, and 2 or 3 rows are slower still.
The same product taken weight first, (W x^T)^T with x^T a transposed view and a single row
doubled into two columns, reads them about 2.5 times as fast. Over SmolLM2-135M's 211 weights
(538 MB), ms per pass of all of them (one run): 1 row 44.1 -> 17.8 (the doubled row), 2 rows
71.1 -> 17.8, 4 rows 61.4 -> 23.2, 8 rows 65.1 -> 40.1. Whole target passes after a 300-token
cache: 1 token 56.3 -> 30.7 ms, 4 tokens 79.4 -> 40.9 ms, 8 tokens 84.5 -> 63.6 ms.

Every output is the same dot product summed in another order: logits differ from F.linear's by
float rounding (3-6e-5 on logits up to ~30 in the passes checked), as they already differ
between pass sizes.

`linear_switch(model)` makes the model's nn.Linear layers switchable; they run weight first only
while a pass has switched them on (TargetModel, which also times both layouts when it tunes its
pass sizes), so transformers' own use of the same model object (generate, an ONNX export) is
untouched. Pure arithmetic apart from that switch: no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# Passes of more rows (prefills, big batches) keep F.linear: weight first was measured as fast
# or faster at 1-11 and 16-64 rows (slower at 12-15 alone, which lone passes pad to 16: see
# batch_planner.py), and not beyond.
MAX_WEIGHT_FIRST_ROWS = 64


def weight_first_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias), computed as (weight @ x^T)^T: [..., in] -> [..., out], contiguous."""
    rows = x.numel() // x.shape[-1]
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    if rows == 1:  # two columns make it a matrix product, not the slow matrix-vector one
        flat = torch.cat([flat, flat])
    out = torch.mm(weight, flat.t()).t()[:rows].contiguous()
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class LinearSwitch:
    """Whether the model's switchable linear layers run weight first now (off between passes)."""

    def __init__(self) -> None:
        self.weight_first = False

    @contextlib.contextmanager
    def set(self, weight_first: bool) -> Iterator[None]:
        """Run the layers weight first (or not) for the span of one pass. Passes run on one thread."""
        previous, self.weight_first = self.weight_first, weight_first
        try:
            yield
        finally:
            self.weight_first = previous


class SwitchableLinear(torch.nn.Linear):
    """nn.Linear that computes weight first while its switch says so, for up to MAX_WEIGHT_FIRST_ROWS rows."""

    switch: LinearSwitch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.switch.weight_first and x.numel() <= MAX_WEIGHT_FIRST_ROWS * self.in_features:
            return weight_first_linear(x, self.weight, self.bias)
        return super().forward(x)


def linear_switch(model: torch.nn.Module) -> LinearSwitch:
    """The switch of the model's nn.Linear layers, making them SwitchableLinear the first time
    (same parameters, shared or tied ones included; off, they compute exactly as before)."""
    switch: LinearSwitch | None = getattr(model, "_specdec_linear_switch", None)
    if switch is None:
        switch = LinearSwitch()
        for module in model.modules():
            if type(module) is torch.nn.Linear:
                module.__class__ = SwitchableLinear
                module.switch = switch
        model._specdec_linear_switch = switch
    return switch

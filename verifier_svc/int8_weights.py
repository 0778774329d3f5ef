"""Weight-only int8 linear layers (`--quantization int8`): the served model's nn.Linear weights
as int8 values with one scale per output channel, activations in bfloat16, products through
torch's own `_weight_int8pack_mm`.

The weights take a quarter of float32's bytes, and their products are the cheapest this
project's 2-core AMD EPYC (no matrix unit for bfloat16 or int8) runs at every decoding size: over
SmolLM2-135M's 211 linear weights, ms for all their products (median of 10,
bench/results/int8_weight_only_probe-20261127.txt): 1 row 30.7 against 67.0 in float32 as
served and 35.1 in bfloat16; 4 rows 44.7 against 98.6 and 90.9; 16 rows 131 against 162 and
315. Whole lone passes of 4-8 tokens run 1.4-1.5x faster than bfloat16's, one-token passes
about as fast (docs/design/int8-weights.md). With float32 rows the same kernel ran 1 row in
116 ms, so int8 weights are served with bfloat16 activations only.

The model served is the quantized one: weight = int8 value x its channel's bfloat16 scale,
exactly. Exactness is with respect to that model (transformers' own forward and generate() over
these layers is the reference); the kernel computes each row of a product on its own, so a row's
output does not depend on the other rows of its pass. Pure arithmetic: no I/O.
"""

from __future__ import annotations

import torch

QUANTIZATIONS = ("none", "int8")
# The activations int8 weights are served with (see the module docstring).
INT8_ACTIVATIONS = torch.bfloat16


def int8_per_channel(weight: torch.Tensor, scale_dtype: torch.dtype = INT8_ACTIVATIONS) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [out, in] int8, scales [out] of scale_dtype) with values x scale nearest to the
    weight for the scale as stored: each channel's largest magnitude maps to 127."""
    wide = weight.detach().float()
    scales = (wide.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127).to(scale_dtype)
    values = (wide / scales.float()[:, None]).round().clamp(-127, 127).to(torch.int8)
    return values.contiguous(), scales


class Int8Linear(torch.nn.Module):
    """y = x (values x scales)^T + bias over inputs [..., in_features], computed in the scales'
    dtype (inputs of another dtype are converted in and out)."""

    def __init__(self, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = values.shape
        self.register_buffer("values", values)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", None if bias is None else bias.detach().to(scales.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(self.scales.dtype).contiguous()
        out = torch._weight_int8pack_mm(rows, self.values, self.scales)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def dequantized(self) -> torch.Tensor:
        """The weight this layer serves, [out, in] in float32 (exact: an int8 value times a bfloat16 scale)."""
        return self.values.float() * self.scales.float()[:, None]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


@torch.no_grad()
def quantize_linear_layers(model: torch.nn.Module) -> int:
    """Replace every nn.Linear of the model with an Int8Linear of its weight (a weight shared by
    several layers, such as a tied output head's, quantized once; an embedding it is tied to keeps
    its own values). Returns the bytes of the int8 values and scales made."""
    made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            if id(child.weight) not in made:
                made[id(child.weight)] = int8_per_channel(child.weight)
            values, scales = made[id(child.weight)]
            setattr(parent, name, Int8Linear(values, scales, child.bias))
    return sum(v.numel() * v.element_size() + s.numel() * s.element_size() for v, s in made.values())


def quantization_error(quantization: str, device: str, dtype: str) -> str | None:
    """Why --quantization cannot be served with --device and --dtype (None: it can)."""
    if quantization not in QUANTIZATIONS:
        return f"{quantization!r} is not one of {', '.join(QUANTIZATIONS)}"
    if quantization == "int8" and torch.device(device).type != "cpu":
        return f"int8 weights are served on CPU only (got --device {device})"
    if quantization == "int8" and dtype not in ("auto", "bfloat16"):
        return f"int8 weights are served with bfloat16 activations (--dtype bfloat16 or auto; got {dtype})"
    return None

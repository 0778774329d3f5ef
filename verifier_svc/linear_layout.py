"""The target's linear layers on CPU: a pass of few rows computes x W^T weight first.

A decoding pass multiplies a few rows x (1 to 16 tokens) by each weight W. On a 2-core AMD EPYC,
torch 2.13's MKL does that slowly as F.linear computes it: one row goes through a matrix-vector
product that reads the weights at ~12 GB/s, and 2 or 3 rows are slower still.
The same product taken weight first, (W x^T)^T with x^T a transposed view and a single row
doubled into two columns, reads them about 2.5 times as fast. Over SmolLM2-135M's 211 weights
(538 MB), ms per pass of all of them (one run): 1 row 44.1 -> 17.8 (the doubled row), 2 rows
71.1 -> 17.8, 4 rows 61.4 -> 23.2, 8 rows 65.1 -> 40.1. Whole target passes after a 300-token
cache: 1 token 56.3 -> 30.7 ms, 4 tokens 79.4 -> 40.9 ms, 8 tokens 84.5 -> 63.6 ms.

Every output is the same dot product summed in another order (each product as close to float64
as F.linear's): logits differ from F.linear's by float rounding, as they already differ between
pass sizes, 3-6e-5 on logits up to ~30 in most passes checked, up to 4.4e-3 where the model
amplifies it (a 4-token pass after 32 copies of one token, 2026-11-28).

A pass of exactly one row (a plain decoding step) reads the weights faster still from a copy of
W^T cut along its input dimension into one block per torch thread: a batched product of the
blocks (torch.bmm runs one block a thread) summed. MKL's two-column product keeps two threads
busy at about 60% of the bandwidth a plain read gets; the blocks reach about 85%, in float32
only (bfloat16 blocks run 12x slower than F.linear). Over the 211 weights, one run: 54.3 -> 37.7
ms; a whole one-token pass 92.9 -> 73.8 ms median (docs/design/one-row-copies.md). The copy
doubles the memory of the linear weights, so `one_row_copies` makes it only where memory
allows, and the CPU backend keeps it only where its start-up timing finds it faster.

In bfloat16 (and float16), where this CPU has no matrix unit for them, products of
FLOAT32_MIN_ROWS rows or more run faster from a float32 copy of the weights (`float32_copies`):
the rows upcast, the product in float32, the output rounded back. A product of two bfloat16
values is exact in float32 and both sum in float32, so again only the summation order differs.
Fewer rows keep the bfloat16 weights, which F.linear reads at half the bytes. Over the 211
weights, bfloat16 F.linear against the float32 copy weight first, ms (one run): 1 row 27.5 /
65.3, 2 rows 41.4 / 71.9, 4 rows 74.7 / 73.2, 8 rows 147.6 / 94.5, 64 rows 1,081 / 242
(docs/design/float32-copies.md).

Products of several rows run fastest from a copy of each float32 weight reordered into oneDNN's
blocked layout (`onednn_copies`) and multiplied by torch's own oneDNN linear op (torch.ops.mkldnn,
private to torch: the tests check it at the pinned version). On the 2-core AMD EPYC, where torch's
MKL runs products of 8 rows or more at ~45-75 GFLOP/s, the 211 weights take (ms, one run; weight
first / F.linear / oneDNN) 47 / 62 / 30 for 8 rows, 58 / 71 / 38 for 16, 140 / 153 / 106 for 64,
but 21 / 76 / 38 for 2; a batched pass of 16 sessions' one-token rounds 147 -> 100 ms
(docs/design/onednn-copies.md). The products sum in another order (logits 3-7e-5 from the other
layouts'). Made for float32 weights, and for bfloat16 ones where oneDNN has bfloat16 kernels for
this CPU (AVX-512 BF16 here: 21 against bfloat16 F.linear's 31 ms for one row, 22 against 34 for
8), where memory allows; the CPU backend times passes with and without them at start and sets
the fewest rows that read them (`LinearSwitch.onednn_min_rows`, 0: none).

Another CPU may rank the layouts the other way (a 2-core Intel Xeon with AMX, 2026-11-28: 2 rows
25.8 ms through F.linear against 60.7 weight first), which is why the CPU backend times both at
start (backends/cpu_tuning.py) before it keeps one.

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
# Products of this many rows or more read a float32 copy of narrow weights where one is made.
FLOAT32_MIN_ROWS = 4


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


def one_row_copy(weight: torch.Tensor, blocks: int) -> torch.Tensor:
    """W^T [in, out] cut along `in` into `blocks` equal blocks: [blocks, in / blocks, out], contiguous."""
    return weight.detach().t().contiguous().view(blocks, weight.shape[1] // blocks, weight.shape[0])


def one_row_linear(x: torch.Tensor, copy: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x of one row ([..., in], one_row_copy of the weight): each
    block's product on its own thread, then their sum."""
    blocks, width, out_features = copy.shape
    out = torch.bmm(x.reshape(blocks, 1, width), copy).sum(0)
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], out_features)


def copy_blocks(in_features: int, threads: int) -> int:
    """Blocks of a one-row copy: the most, up to one a thread, that divide the input evenly."""
    return max(b for b in range(1, max(threads, 1) + 1) if in_features % b == 0)


def float32_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x of a narrower float dtype and `weight` its weight's float32
    copy: computed in float32 (weight first up to MAX_WEIGHT_FIRST_ROWS rows), returned in x's dtype."""
    wide, wide_bias = x.float(), None if bias is None else bias.float()
    if x.numel() <= MAX_WEIGHT_FIRST_ROWS * x.shape[-1]:
        return weight_first_linear(wide, weight, wide_bias).to(x.dtype)
    return torch.nn.functional.linear(wide, weight, wide_bias).to(x.dtype)


def onednn_copy(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] reordered into oneDNN's blocked layout for linear products (an opaque
    tensor that only onednn_linear reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def onednn_linear(x: torch.Tensor, copy: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) from onednn_copy(weight): oneDNN's product."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), copy, bias, "none", [], "")


def onednn_dtype_ready(dtype: torch.dtype) -> bool:
    """Whether oneDNN copies of CPU weights of `dtype` can be made here: float32, or bfloat16
    where oneDNN has bfloat16 kernels for this CPU (AVX-512 BF16 or AMX); oneDNN built in and its
    private ops present (a torch without them serves without the copies)."""
    ops = ("_reorder_linear_weight", "_linear_pointwise")
    if not torch.backends.mkldnn.is_available() or not all(hasattr(torch.ops.mkldnn, op) for op in ops):
        return False
    bfloat16_kernels = hasattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported") and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return dtype == torch.float32 or (dtype == torch.bfloat16 and bfloat16_kernels)


def onednn_ready(weight: torch.Tensor) -> bool:
    """Whether a oneDNN copy of `weight` can be made here (a CPU tensor of a dtype onednn_dtype_ready)."""
    return weight.device.type == "cpu" and onednn_dtype_ready(weight.dtype)


class LinearSwitch:
    """Whether the model's switchable linear layers run weight first now, whether a one-row
    product reads their one-row copies, whether a product of FLOAT32_MIN_ROWS rows or more reads
    their float32 copies, and from how many rows a product reads their oneDNN copies (0: none)
    (all off between passes)."""

    def __init__(self) -> None:
        self.weight_first = False
        self.one_row = False
        self.float32_rows = False
        self.onednn_min_rows = 0

    @contextlib.contextmanager
    def set(self, weight_first: bool, one_row: bool = False, float32_rows: bool = False, onednn_min_rows: int = 0) -> Iterator[None]:
        """Run the layers weight first (or not), one-row products from the one-row copies,
        products of FLOAT32_MIN_ROWS rows or more from the float32 copies and products of
        onednn_min_rows rows or more (0: none) from the oneDNN copies where made, for the span of
        one pass. Passes run on one thread."""
        previous = self.weight_first, self.one_row, self.float32_rows, self.onednn_min_rows
        self.weight_first, self.one_row, self.float32_rows, self.onednn_min_rows = weight_first, one_row, float32_rows, onednn_min_rows
        try:
            yield
        finally:
            self.weight_first, self.one_row, self.float32_rows, self.onednn_min_rows = previous


class SwitchableLinear(torch.nn.Linear):
    """nn.Linear that computes the switch's onednn_min_rows rows or more from its oneDNN copy
    where it has one; else FLOAT32_MIN_ROWS rows or more from its float32 copy where it has one
    and the switch says so; else weight first while the switch says so, for up to
    MAX_WEIGHT_FIRST_ROWS rows, and one row from its one-row copy where it has one."""

    switch: LinearSwitch
    one_row_weight: torch.Tensor | None = None
    float32_weight: torch.Tensor | None = None
    onednn_weight: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.numel()
        onednn_from = self.switch.onednn_min_rows
        if onednn_from and self.onednn_weight is not None and size >= onednn_from * self.in_features:
            return onednn_linear(x, self.onednn_weight, self.bias)
        if self.switch.float32_rows and self.float32_weight is not None and size >= FLOAT32_MIN_ROWS * self.in_features:
            return float32_linear(x, self.float32_weight, self.bias)
        if self.switch.weight_first and size <= MAX_WEIGHT_FIRST_ROWS * self.in_features:
            if self.switch.one_row and self.one_row_weight is not None and size == self.in_features:
                return one_row_linear(x, self.one_row_weight, self.bias)
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


def switchable_layers(model: torch.nn.Module) -> list[SwitchableLinear]:
    """The model's switchable linear layers (linear_switch made them)."""
    return [module for module in model.modules() if isinstance(module, SwitchableLinear)]


@torch.no_grad()
def one_row_copies(model: torch.nn.Module, threads: int) -> int:
    """Give each switchable linear layer a one-row copy of its weight, in `threads` blocks where
    its input divides so (layers sharing a weight share its copy); returns the bytes made."""
    made: dict[int, torch.Tensor] = {}
    for layer in switchable_layers(model):
        blocks = copy_blocks(layer.in_features, threads)
        if blocks > 1:
            key = id(layer.weight)
            if key not in made:
                made[key] = one_row_copy(layer.weight, blocks)
            layer.one_row_weight = made[key]
    return sum(copy.numel() * copy.element_size() for copy in made.values())


def drop_one_row_copies(model: torch.nn.Module) -> None:
    """Free the layers' one-row copies (a one-row product then runs weight first)."""
    for layer in switchable_layers(model):
        layer.one_row_weight = None


@torch.no_grad()
def float32_copies(model: torch.nn.Module) -> int:
    """Give each switchable linear layer a float32 copy of its weight (layers sharing a weight
    share its copy); returns the bytes made."""
    made: dict[int, torch.Tensor] = {}
    for layer in switchable_layers(model):
        key = id(layer.weight)
        if key not in made:
            made[key] = layer.weight.detach().float()
        layer.float32_weight = made[key]
    return sum(copy.numel() * copy.element_size() for copy in made.values())


def drop_float32_copies(model: torch.nn.Module) -> None:
    """Free the layers' float32 copies."""
    for layer in switchable_layers(model):
        layer.float32_weight = None


@torch.no_grad()
def onednn_copies(model: torch.nn.Module) -> int:
    """Give each switchable linear layer whose weight onednn_ready a oneDNN copy (layers sharing a
    weight share its copy); returns the bytes made (the weights' own size)."""
    made: dict[int, torch.Tensor] = {}
    for layer in switchable_layers(model):
        key = id(layer.weight)
        if onednn_ready(layer.weight):
            if key not in made:
                made[key] = onednn_copy(layer.weight)
            layer.onednn_weight = made[key]
    weights = {id(layer.weight): layer.weight for layer in switchable_layers(model) if layer.onednn_weight is not None}
    return sum(w.numel() * w.element_size() for w in weights.values())


def drop_onednn_copies(model: torch.nn.Module) -> None:
    """Free the layers' oneDNN copies."""
    for layer in switchable_layers(model):
        layer.onednn_weight = None

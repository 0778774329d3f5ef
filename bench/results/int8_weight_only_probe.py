"""Probe: would weight-only int8 weights make the CPU target's products cheaper? Over the served
model's 211 linear weights (SmolLM2-135M, float32, the tied head included), ms for all 211
products of 1, 2, 4, 8 and 16 rows, median (min) of ROUNDS rounds, the candidates alternated:

- fp32 F.linear; fp32 as served (one row from the one-row copies, 4 rows weight first:
  linear_layout.py);
- bf16 F.linear on bfloat16 weights;
- int8 weight-only: per-output-channel int8 weights and float scales through torch's own
  `_weight_int8pack_mm`, with bfloat16 rows (and with float32 rows for one row: several float32
  rows ran 8x slower than bf16 ones).

Also the largest difference of an int8 product from the float32 one, relative to its largest
output (what serving int8 weights would change; not an exactness question here).

    flock -x /tmp/specdec-cpu.lock python bench/results/int8_weight_only_probe.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from verifier_svc.linear_layout import copy_blocks, one_row_copy, one_row_linear, weight_first_linear
from verifier_svc.model_loader import open_model

ROUNDS = 10


def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
    return (weight / scales[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous(), scales


def seconds_of(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    torch.manual_seed(0)
    model, _ = open_model("default", "cpu", torch.float32)
    weights = list({id(m.weight): m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)}.values())
    blocks = copy_blocks(576, torch.get_num_threads())
    copies = [one_row_copy(w, copy_blocks(w.shape[1], torch.get_num_threads())) for w in weights]
    narrow = [w.to(torch.bfloat16) for w in weights]
    quantized = [int8_per_channel(w) for w in weights]
    quantized_bf16 = [(q, s.to(torch.bfloat16)) for q, s in quantized]
    print(f"{len(weights)} weights, {sum(w.numel() for w in weights) / 1e6:.1f} M values, {torch.get_num_threads()} threads, copy blocks {blocks}")
    for rows in (1, 2, 4, 8, 16):
        x = {k: torch.randn(rows, k) for k in (576, 1536)}
        xb = {k: v.to(torch.bfloat16) for k, v in x.items()}
        served: Callable[[], object] = (
            (lambda: [one_row_linear(x[w.shape[1]], c, None) for w, c in zip(weights, copies)]) if rows == 1
            else (lambda: [weight_first_linear(x[w.shape[1]], w, None) for w in weights])
        )
        candidates: dict[str, Callable[[], object]] = {
            "fp32 F.linear": lambda: [F.linear(x[w.shape[1]], w) for w in weights],
            "fp32 as served": served,
            "bf16 F.linear": lambda: [F.linear(xb[w.shape[1]], w) for w in narrow],
            "int8, fp32 rows": lambda: [torch._weight_int8pack_mm(x[q.shape[1]], q, s) for q, s in quantized],
            "int8, bf16 rows": lambda: [torch._weight_int8pack_mm(xb[q.shape[1]], q, s) for q, s in quantized_bf16],
        }
        if rows > 1:
            del candidates["int8, fp32 rows"]
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for fn in candidates.values():
            fn()  # warm-up
        for _ in range(ROUNDS):
            for name, fn in candidates.items():
                times[name].append(seconds_of(fn))
        print(f"\n{rows} row(s): ms for the 211 products, median (min) of {ROUNDS}")
        for name, t in times.items():
            print(f"  {name:18s} {1000 * statistics.median(t):7.1f} ({1000 * min(t):.1f})")
    head, (q, s) = weights[-1], quantized[-1]
    row = torch.randn(1, head.shape[1])
    exact = F.linear(row, head)
    print(f"\nint8 head output against float32: max difference {float((torch._weight_int8pack_mm(row, q, s) - exact).abs().max()):.4f}"
          f" of outputs up to {float(exact.abs().max()):.2f}")


if __name__ == "__main__":
    main()

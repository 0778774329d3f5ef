"""Probe: bfloat16 products of several rows over SmolLM2-135M's 211 linear weights (random values,
its shapes), as bfloat16 F.linear and weight first, against the same products from float32 copies
of the bfloat16 weights (the row upcast, the output rounded back to bfloat16: products of two
bfloat16 values are exact in float32, and both sum in float32, so only the summation order
differs). Prints ms for all 211 products, median of 5 rounds, the candidates alternated.

    flock -x /tmp/specdec-cpu.lock python bench/results/float32_rows_probe.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from verifier_svc.linear_layout import weight_first_linear

LAYER = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # (out, in)
ROWS = (1, 2, 4, 8, 16, 64, 256)


def seconds_of(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    torch.manual_seed(0)
    weights = [torch.randn(n, k).to(torch.bfloat16) for _ in range(30) for n, k in LAYER] + [torch.randn(49152, 576).to(torch.bfloat16)]
    wide = [w.float() for w in weights]
    for rows in ROWS:
        x = {k: torch.randn(rows, k).to(torch.bfloat16) for k in (576, 1536)}
        candidates: dict[str, Callable[[], object]] = {
            "bf16 F.linear": lambda: [F.linear(x[w.shape[1]], w) for w in weights],
            "bf16 weight first": lambda: [weight_first_linear(x[w.shape[1]], w, None) for w in weights],
            "fp32 copy F.linear": lambda: [F.linear(x[w.shape[1]].float(), w).bfloat16() for w in wide],
            "fp32 copy weight first": lambda: [weight_first_linear(x[w.shape[1]].float(), w, None).bfloat16() for w in wide],
        }
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for turn in range(6):
            for name, fn in candidates.items() if turn % 2 else reversed(candidates.items()):
                times[name].append(seconds_of(fn))
        line = "  ".join(f"{name} {1000 * sorted(t[1:])[2]:7.1f}" for name, t in times.items())
        print(f"rows={rows:4d}  {line}  (ms, median of 5)", flush=True)


if __name__ == "__main__":
    main()

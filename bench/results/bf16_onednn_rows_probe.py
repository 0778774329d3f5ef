"""Probe: bfloat16 products over SmolLM2-135M's 211 linear shapes (random values): bfloat16
F.linear, oneDNN's product from a reordered bfloat16 copy (torch.ops.mkldnn, AVX-512 BF16), and
the float32 copy's product (float32_copies: rows upcast, output rounded back) through F.linear.
ms for all 211 products, min of 3 rounds.

    flock -x /tmp/specdec-cpu.lock python bench/results/bf16_onednn_rows_probe.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

LAYER = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # (out, in)


def main() -> None:
    torch.manual_seed(0)
    weights = [torch.randn(o, i).div(i**0.5).bfloat16() for _ in range(30) for o, i in LAYER] + [torch.randn(49152, 576).div(24).bfloat16()]
    onednn = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in weights]
    wide = [w.float() for w in weights]
    print(f"oneDNN bfloat16 kernels: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}; {sum(w.numel() * 2 for w in weights) >> 20} MB of bfloat16 weights")
    for rows in (1, 2, 4, 8, 16, 64, 256):
        x = {k: torch.randn(rows, k).bfloat16() for k in (576, 1536)}
        candidates: dict[str, Callable[[], object]] = {
            "bf16 F.linear": lambda: [torch.nn.functional.linear(x[w.shape[1]], w) for w in weights],
            "bf16 oneDNN copy": lambda: [torch.ops.mkldnn._linear_pointwise(x[w.shape[1]], c, None, "none", [], "") for w, c in zip(weights, onednn)],
            "fp32 copy F.linear": lambda: [torch.nn.functional.linear(x[w.shape[1]].float(), w).bfloat16() for w in wide],
        }
        best = {name: float("inf") for name in candidates}
        for _ in range(3):
            for name, run in candidates.items():
                began = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - began)
        print(f"rows={rows:4d}  " + "  ".join(f"{name} {1000 * t:7.1f}" for name, t in best.items()) + "  (ms, min of 3)", flush=True)


if __name__ == "__main__":
    main()

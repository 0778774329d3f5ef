"""Probe: one-row products over SmolLM2-135M's 211 linear weights (random values, its shapes),
weight first as served before against a one-row copy cut in blocks (linear_layout.py), with
more rows, and in bfloat16; a plain read of the same bytes as the ceiling. Prints ms for all 211
products (median of 7) and the read rate; the process's CPU time over wall time shows how many
threads each kept busy.

    flock -x /tmp/specdec-cpu.lock python bench/results/one_row_probe.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from verifier_svc.linear_layout import copy_blocks, one_row_copy, one_row_linear, weight_first_linear

LAYER = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # (out, in)


def timed(fn: Callable[[], object], reps: int = 6) -> tuple[float, float]:
    """Median seconds of fn over 7 rounds, and CPU time over wall time in that round."""
    for _ in range(2):
        fn()
    rounds = []
    for _ in range(7):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(reps):
            fn()
        rounds.append(((time.perf_counter() - wall) / reps, (time.process_time() - cpu) / reps))
    seconds, cpu_seconds = sorted(rounds)[3]
    return seconds, cpu_seconds / seconds


def main() -> None:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    for dtype in (torch.float32, torch.bfloat16):
        weights = [torch.randn(n, k).to(dtype) for _ in range(30) for n, k in LAYER] + [torch.randn(49152, 576).to(dtype)]
        copies = [one_row_copy(w, copy_blocks(w.shape[1], threads)) for w in weights]
        gb = sum(w.numel() * w.element_size() for w in weights) / 1e9
        for rows in (1, 4) if dtype == torch.float32 else (1,):
            x = {k: torch.randn(rows, k).to(dtype) for k in (576, 1536)}
            candidates = {
                "plain read (sum)": lambda: [w.sum() for w in weights],
                "weight first": lambda: [weight_first_linear(x[w.shape[1]], w, None) for w in weights],
                "F.linear": lambda: [torch.nn.functional.linear(x[w.shape[1]], w) for w in weights],
            }
            if rows == 1:
                candidates["one-row copy"] = lambda: [one_row_linear(x[c.shape[0] * c.shape[1]], c, None) for c in copies]
            else:  # the copy's layout with more rows: x @ W^T by blocks
                candidates["copy layout, 4 rows"] = lambda: [
                    torch.bmm(x[c.shape[0] * c.shape[1]].view(rows, c.shape[0], c.shape[1]).transpose(0, 1), c).sum(0) for c in copies
                ]
            for name, fn in candidates.items():
                seconds, busy = timed(fn)
                print(f"{str(dtype):15s} rows={rows} {name:22s} {1000 * seconds:7.1f} ms  {gb / seconds:5.1f} GB/s  CPUs busy {busy:.2f}", flush=True)


if __name__ == "__main__":
    main()

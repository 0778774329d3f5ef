"""F.linear over 60 products of the default model's MLP shapes ([1536, 576] and [576, 1536]), 1-16
rows, best of 7, with and without MKL's CPU-dispatch switches in the environment (run once per
setting: `MKL_ENABLE_INSTRUCTIONS=AVX512 python bench/results/mkl_switches_probe.py`)."""

import time, torch, os
torch.manual_seed(0)
W = [torch.randn(1536, 576) for _ in range(30)] + [torch.randn(576, 1536) for _ in range(30)]
def run(rows):
    xs = {576: torch.randn(rows, 576), 1536: torch.randn(rows, 1536)}
    best = 1e9
    for _ in range(7):
        t = time.perf_counter()
        for w in W: torch.nn.functional.linear(xs[w.shape[1]], w)
        best = min(best, time.perf_counter() - t)
    return best * 1e3
print(os.environ.get("MKL_ENABLE_INSTRUCTIONS", "-"), os.environ.get("MKL_DEBUG_CPU_TYPE", "-"), " ".join(f"{r}:{run(r):.1f}ms" for r in (1, 4, 8, 16)))

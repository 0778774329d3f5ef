"""Probe: lone passes of 1, 4 and 8 tokens after 256 cached tokens through TargetModel.score as
the verifier serves them, bfloat16 (F.linear, float32 copies for products of 4 rows or more, as
start-up tuning keeps them on this host) against bfloat16 with int8 weights
(`--quantization int8`), both targets in one process, turns alternated, 30 each; median (min) ms.

    flock -x /tmp/specdec-cpu.lock python bench/results/int8_passes_probe.py
"""
import statistics, time, torch
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.token_tree import chain
targets = {}
for name, q in (("bf16", "none"), ("int8", "int8")):
    t, _ = load_target(VerifierSettings(model="default", dtype="bfloat16", quantization=q, tune_pass_sizes=False))
    t.backend.weight_first = False if name == "bf16" else True
    targets[name] = t
ctx = [1000 + i for i in range(256)]
caches = {}
for name, t in targets.items():
    c = t.new_cache(); t.score(c, ctx, chain([])); caches[name] = c
for n in (1, 4, 8):
    times = {k: [] for k in targets}
    def run(name):
        t, c = targets[name], caches[name]
        s = time.perf_counter(); t.score(c, [5000], chain(list(range(3000, 3000 + n - 1)))); e = time.perf_counter() - s
        c.truncate(256); return e
    for name in targets: run(name)
    for i in range(30):
        for name in (("bf16", "int8") if i % 2 == 0 else ("int8", "bf16")):
            times[name].append(run(name))
    print(n, "tokens:", "; ".join(f"{k} {1000*statistics.median(v):.1f} ({1000*min(v):.1f})" for k, v in times.items()),
          f"; bf16/int8 median {statistics.median(times['bf16'])/statistics.median(times['int8']):.2f}")

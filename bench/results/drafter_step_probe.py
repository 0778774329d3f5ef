"""Probe (2026-12-02): one-token steps (and 4-token calls) of a built drafter folder after a
150-token cache, median and minimum of N calls, on T onnxruntime threads. Run it on two builds
or two onnxruntime versions in turns (PYTHONPATH naming another onnxruntime first).

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/drafter_step_probe.py FOLDER 300 [THREADS]
Output: bench/results/drafter_step_probe-20261202.txt (docs/design/int8-drafter.md)."""
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime

from drafter_svc.draft_model import DraftModel, causal_bias


def main() -> None:
    folder, steps = Path(sys.argv[1]), int(sys.argv[2])
    model = DraftModel(folder, threads=int(sys.argv[3]) if len(sys.argv) > 3 else 2)
    ids = [int(t) for t in np.random.default_rng(0).integers(1000, 5000, 150)]
    cache = model.empty_cache()
    model.run(ids, range(150), causal_bias(0, 150), cache, last_only=True)
    ones, fours = [], []
    for i in range(steps):
        cache.truncate(150)
        began = time.perf_counter()
        model.run([ids[i % 150]], [150], causal_bias(150, 1), cache)
        ones.append(time.perf_counter() - began)
    for _ in range(steps // 4):
        cache.truncate(150)
        began = time.perf_counter()
        model.run(ids[:4], range(150, 154), causal_bias(150, 4), cache)
        fours.append(time.perf_counter() - began)
    print(f"onnxruntime {onnxruntime.__version__}, {folder.name}: one-token step median {1000 * statistics.median(ones):.2f} "
          f"min {1000 * min(ones):.2f} ms; 4-token call median {1000 * statistics.median(fours):.2f} ms")


if __name__ == "__main__":
    main()

"""Probe (2026-11-28): the int8 model drafter's one-token step (256 cached tokens) under three
ways for onnxruntime's two intra-op threads to wait: parked between nodes (allow_spinning 0, the
drafter's setting before), spinning (onnxruntime's default: they keep spinning after a call), and
spinning within a call only (allow_spinning 1 + session.force_spinning_stop 1, now both
services' setting: specdec/onnx_threads.py). Calls are `gap` apart, as a drafter's are while the
verifier works; blocks of 10 in turns; the process's CPU time per call counts what the threads
burn between calls.

    flock -x /tmp/specdec-cpu.lock python bench/results/onnx_threads_probe.py [gap seconds]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

from specdec.model_files import drafter_dir

CONTEXT = 256


def session(path: str, spinning: str, stop: bool):  # type: ignore[no-untyped-def]
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 2, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    if stop:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def main(gap: float) -> None:
    path = str(drafter_dir("default", "quantized") / "model.onnx")
    sessions = {"parked": session(path, "0", False), "spinning": session(path, "1", False), "spinning within a call": session(path, "1", True)}
    feed: dict[str, np.ndarray] = {}
    for arg in sessions["parked"].get_inputs():
        feed[arg.name] = {"input_ids": np.array([[5000]]), "position_ids": np.array([[CONTEXT]]), "logits_index": np.array([0]),
                          "attention_bias": np.zeros((1, 1, 1, CONTEXT + 1), np.float32)}.get(arg.name, np.random.randn(1, 3, CONTEXT, 64).astype(np.float32))
    times: dict[str, list[float]] = {name: [] for name in sessions}
    cpu = dict.fromkeys(sessions, 0.0)
    for turn in range(8):
        for name in list(sessions) if turn % 2 == 0 else list(sessions)[::-1]:
            for _ in range(3):
                sessions[name].run(None, feed)
            time.sleep(0.05)
            began_cpu = time.process_time()
            for _ in range(10):
                time.sleep(gap)
                began = time.perf_counter()
                sessions[name].run(None, feed)
                times[name].append(time.perf_counter() - began)
            cpu[name] += time.process_time() - began_cpu
    for name, seconds in times.items():
        print(f"gap {1000 * gap:.0f} ms, {name}: median {1000 * statistics.median(seconds):.2f} ms a call, CPU {1000 * cpu[name] / len(seconds):.1f} ms a call")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.003)

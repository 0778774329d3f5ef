"""Probe (2026-11-29): do 2 MB pages make onnxruntime's float32 step read its weights faster?
Two sessions over the default model's kept step (verifier_svc/backends/onnx_passes.py) in one
process; the anonymous memory that appeared while one of them loaded (its weights, prepacked) is
collapsed into huge pages (madvise MADV_HUGEPAGE then MADV_COLLAPSE; this host's transparent
huge pages are `madvise` only), and one-token passes after 256 cached tokens alternate between
the sessions, 30 blocks of 10. The collapsed session is the first or the second (the second
session loaded ran ~4% faster in other probes), so run it both ways:

    for w in B A B A; do PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/huge_pages_probe.py $w; done
Output: bench/results/huge_pages_probe-20261129.txt (docs/design/onnx-passes.md, "Not yet")."""
import ctypes
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

from verifier_svc.backends.onnx_passes import STEP_FILE

MADV_HUGEPAGE, MADV_COLLAPSE, HUGE = 14, 25, 2 << 20
LAYERS, KV_HEADS, HEAD_DIM, CAPACITY, CACHED = 30, 3, 64, 512, 256
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def anonymous_regions() -> set[tuple[int, int]]:
    regions = set()
    for line in open("/proc/self/maps"):
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if len(fields) < 6 and end - start >= HUGE:
            regions.add((start, end))
    return regions


def collapse(regions: set[tuple[int, int]]) -> int:
    done = 0
    for start, end in regions:
        start, end = -(-start // HUGE) * HUGE, end // HUGE * HUGE
        if end > start:
            libc.madvise(start, end - start, MADV_HUGEPAGE)
            done += (end - start) if libc.madvise(start, end - start, MADV_COLLAPSE) == 0 else 0
    return done


def session(path: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def bound(s: ort.InferenceSession) -> tuple[object, list[np.ndarray]]:
    """An IOBinding of a one-token pass after CACHED entries, and the buffers it binds."""
    rng = np.random.default_rng(0)
    keep = [rng.standard_normal((1, KV_HEADS, CAPACITY, HEAD_DIM), dtype=np.float32) * 0.5 for _ in range(2 * LAYERS)]
    binding = s.io_binding()
    inputs, outputs = [i.name for i in s.get_inputs()], [o.name for o in s.get_outputs()]
    for name, value in (("input_ids", [[5000]]), ("position_ids", [[CACHED]]), ("logits_index", [0])):
        keep.append(np.asarray(value, np.int64))
        binding.bind_cpu_input(name, keep[-1])
    keep += [np.zeros((1, 1, 1, CACHED + 1), np.float32), np.asarray([CACHED], np.int32), np.asarray(CACHED + 1, np.int32), np.empty((1, 1, 49152), np.float32)]
    for name, value in zip(("attention_bias", "seqlens_k", "total_length"), keep[-4:-1]):
        binding.bind_cpu_input(name, value)
    binding.bind_output("logits", "cpu", 0, np.float32, [1, 1, 49152], keep[-1].ctypes.data)
    for name, present, buffer in zip(inputs[6:], outputs[1:], keep[: 2 * LAYERS]):
        binding.bind_input(name, "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
        binding.bind_output(present, "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
    return binding, keep


def kept_step() -> str:
    """The default model's kept step, made by a verifier's start in a child process (loading
    the model here would leave freed memory that the sessions' weights then reuse)."""
    code = "from verifier_svc.server import load_target; from verifier_svc.settings import VerifierSettings; print(load_target(VerifierSettings())[0].backend.onnx.folder)"
    folder = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return f"{folder}/{STEP_FILE}"


def main(collapsed: str) -> None:
    path = kept_step()
    before = anonymous_regions()
    sessions = {"A": session(path)}
    middle = anonymous_regions()
    sessions["B"] = session(path)
    mine = {"A": middle - before, "B": anonymous_regions() - middle}
    megabytes = collapse(mine[collapsed]) >> 20
    bindings = {name: bound(s) for name, s in sessions.items()}
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(30):
        for name, s in sessions.items():
            s.run_with_iobinding(bindings[name][0])
            started = time.perf_counter()
            for _ in range(10):
                s.run_with_iobinding(bindings[name][0])
            times[name].append((time.perf_counter() - started) * 100)
    a, b = statistics.median(times["A"]), statistics.median(times["B"])
    ratio = b / a if collapsed == "B" else a / b
    print(f"session {collapsed} collapsed ({megabytes} MB into 2 MB pages): A {a:.2f} ms, B {b:.2f} ms; collapsed / 4 KB pages {ratio:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])

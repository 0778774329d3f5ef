# The cost of a float32 MatMul by its rows in onnxruntime (MLAS): 30 matrices [576, 3072] (212 MB,
# more than the caches), chained, 2 threads; min of 3 blocks of 20 calls. Run at c3b0f27 on 2026-11-28:
#     flock -x /tmp/specdec-cpu.lock python bench/results/matmul_rows_probe.py
# Output: bench/results/matmul_rows_probe-20261128.txt (docs/design/onnx-passes.md, "Not yet").
import numpy as np
import onnx
import onnxruntime as ort

from matmul_chain import K, LAYERS, N, call_ms, chain

PATH = "/tmp/mm.onnx"


def main() -> None:
    onnx.save(chain(), PATH)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(PATH, options, providers=["CPUExecutionProvider"])
    times: dict[int, list[float]] = {}
    for _ in range(3):
        for rows in (1, 2, 4, 8, 16):
            x = np.random.randn(rows, K).astype(np.float32)
            times.setdefault(rows, []).append(call_ms(session, x))
    for rows, values in times.items():
        print(rows, "%.2f ms (%.1f GB/s)" % (min(values), LAYERS * K * N * 4 / min(values) / 1e6))


if __name__ == "__main__":
    main()

"""float32 products of M rows in onnxruntime, the weights as the step graph holds them (x @ W, W
constant [K, N]) and transposed (W^T @ x^T, W^T constant [N, K], x^T [K, M]: the weights as
MLAS's unpacked A matrix, the rows packed as B): 30 matrices [576, 3072] chained, 2 threads, min
of 3 blocks of 20 calls, the two layouts alternated. Run on 2026-11-28 (onnxruntime 1.31.1):
    flock -x /tmp/specdec-cpu.lock python bench/results/matmul_transposed_probe.py
Output: bench/results/matmul_transposed_probe-20261128.txt (docs/design/onnx-passes.md, "Not yet")."""
import numpy as np

from matmul_chain import K, LAYERS, N, call_ms, chain, session


def main() -> None:
    sessions = {"x @ W": session(chain()), "W^T @ x^T": session(chain(transposed=True))}
    times: dict = {}
    for _ in range(3):
        for rows in (1, 2, 4, 8, 16):
            for name, s in sessions.items():
                shape = (K, rows) if name.startswith("W") else (rows, K)
                x = np.random.randn(*shape).astype(np.float32)
                times.setdefault((name, rows), []).append(call_ms(s, x))
    for (name, rows), values in sorted(times.items()):
        best = min(values)
        print(f"{name:10s} rows {rows:2d} {best:6.2f} ms ({LAYERS * K * N * 4 / best / 1e6:.1f} GB/s)")


if __name__ == "__main__":
    main()

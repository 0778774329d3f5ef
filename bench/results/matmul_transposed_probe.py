"""float32 products of M rows in onnxruntime, the weights as the step graph holds them (x @ W, W
constant [K, N]) and transposed (W^T @ x^T, W^T constant [N, K], x^T [K, M]: the weights as
MLAS's unpacked A matrix, the rows packed as B): 30 matrices [576, 3072] chained, 2 threads, min
of 3 blocks of 20 calls, the two layouts alternated. Run on 2026-11-28 (onnxruntime 1.31.1):
    flock -x /tmp/specdec-cpu.lock python bench/results/matmul_transposed_probe.py
Output: bench/results/matmul_transposed_probe-20261128.txt (docs/design/onnx-passes.md, "Not yet")."""
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

LAYERS, K, N = 30, 576, 3072


def chain(transposed: bool) -> bytes:
    nodes, inits = [], []
    x = "x"
    for i in range(LAYERS):
        w = (np.random.randn(K, N) * 0.02).astype(np.float32)
        if transposed:  # x is [K, M]; y = W^T @ x is [N, M]; keep its first K rows
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T), f"w{i}"))
            nodes.append(helper.make_node("MatMul", [f"w{i}", x], [f"y{i}"]))
            axis = 0
        else:  # x is [M, K]; y = x @ W is [M, N]; keep its first K columns
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
            axis = 1
        for name, value in (("s", 0), ("e", K), ("a", axis)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", [f"y{i}", f"s{i}", f"e{i}", f"a{i}"], [f"z{i}"]))
        x = f"z{i}"
    shape = [K, "M"] if transposed else ["M", K]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def session(transposed: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(chain(transposed), options, providers=["CPUExecutionProvider"])


def main() -> None:
    sessions = {"x @ W": session(False), "W^T @ x^T": session(True)}
    times: dict = {}
    for _ in range(3):
        for rows in (1, 2, 4, 8, 16):
            for name, s in sessions.items():
                shape = (K, rows) if name.startswith("W") else (rows, K)
                x = np.random.randn(*shape).astype(np.float32)
                for _ in range(3):
                    s.run(None, {"x": x})
                start = time.perf_counter()
                for _ in range(20):
                    s.run(None, {"x": x})
                times.setdefault((name, rows), []).append((time.perf_counter() - start) / 20 * 1e3)
    for (name, rows), values in sorted(times.items()):
        best = min(values)
        print(f"{name:10s} rows {rows:2d} {best:6.2f} ms ({LAYERS * K * N * 4 / best / 1e6:.1f} GB/s)")


if __name__ == "__main__":
    main()

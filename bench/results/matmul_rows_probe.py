# The cost of a float32 MatMul by its rows in onnxruntime (MLAS): 30 matrices [576, 3072] (212 MB,
# more than the caches), chained, 2 threads; min of 3 blocks of 20 calls. Run at c3b0f27 on 2026-11-28:
#     flock -x /tmp/specdec-cpu.lock python bench/results/matmul_rows_probe.py
# Output: bench/results/matmul_rows_probe-20261128.txt (docs/design/onnx-passes.md, "Not yet").
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

LAYERS, K, N = 30, 576, 3072
PATH = "/tmp/mm.onnx"


def write_chain() -> None:
    """30 products chained, each output sliced back to K columns so that the chain continues."""
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        inits.append(numpy_helper.from_array((np.random.randn(K, N) * 0.02).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
        for name, value in (("s", 0), ("e", K), ("a", 1)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", [f"y{i}", f"s{i}", f"e{i}", f"a{i}"], [f"z{i}"]))
        x = f"z{i}"
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["M", K]) for name in ("x", x)]
    model = helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, PATH)


def main() -> None:
    write_chain()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(PATH, options, providers=["CPUExecutionProvider"])
    times: dict[int, list[float]] = {}
    for _ in range(3):
        for rows in (1, 2, 4, 8, 16):
            x = np.random.randn(rows, K).astype(np.float32)
            for _ in range(3):
                session.run(None, {"x": x})
            start = time.perf_counter()
            for _ in range(20):
                session.run(None, {"x": x})
            times.setdefault(rows, []).append((time.perf_counter() - start) / 20 * 1000)
    for rows, values in times.items():
        print(rows, "%.2f ms (%.1f GB/s)" % (min(values), LAYERS * K * N * 4 / min(values) / 1e6))


if __name__ == "__main__":
    main()

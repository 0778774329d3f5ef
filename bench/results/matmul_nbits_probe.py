"""onnxruntime's MatMulNBits (the drafters' int8 products) on this CPU: 1 and 8 rows through 30
[576, 3072] products quantized by MatMulNBitsQuantizer at 8 and 4 bits, blocks of 32 and 128,
int8 products (accuracy level 4) or float32 ones (0); 2 threads spinning, min of 3 blocks of 20.
Run on 2026-11-28 (onnxruntime 1.31.1, an AMD EPYC):
    flock -x /tmp/specdec-cpu.lock python bench/results/matmul_nbits_probe.py
Output: bench/results/matmul_nbits_probe-20261128.txt (docs/design/int8-drafter.md)."""
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

LAYERS, K, N = 30, 576, 3072
SETTINGS = ((8, 32, 4), (8, 128, 4), (4, 32, 4), (4, 128, 4), (8, 32, 0))  # bits, block, accuracy level


def float_chain() -> onnx.ModelProto:
    """30 float32 products chained, each output sliced back to K columns."""
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
    return model


def quantized_session(base: onnx.ModelProto, bits: int, block: int, accuracy: int) -> ort.InferenceSession:
    quantizer = MatMulNBitsQuantizer(onnx.ModelProto.FromString(base.SerializeToString()), bits=bits, block_size=block, is_symmetric=True, accuracy_level=accuracy)
    quantizer.process()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    return ort.InferenceSession(quantizer.model.model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    base = float_chain()
    sessions = {setting: quantized_session(base, *setting) for setting in SETTINGS}
    times: dict = {}
    for _ in range(3):
        for setting, session in sessions.items():
            for rows in (1, 8):
                x = np.random.randn(rows, K).astype(np.float32)
                for _ in range(3):
                    session.run(None, {"x": x})
                start = time.perf_counter()
                for _ in range(20):
                    session.run(None, {"x": x})
                times.setdefault((setting, rows), []).append((time.perf_counter() - start) / 20 * 1e3)
    for ((bits, block, accuracy), rows), values in sorted(times.items()):
        best, packed_mb = min(values), LAYERS * K * N * bits / 8 / 1e6
        print(f"bits {bits} block {block:3d} acc {accuracy} rows {rows}: {best:6.2f} ms ({packed_mb / best:.1f} GB/s of packed weights)")


if __name__ == "__main__":
    main()

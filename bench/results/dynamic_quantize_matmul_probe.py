"""onnxruntime's DynamicQuantizeMatMul (int8 weights with one scale per output column, the
activations quantized per call: what quantize_dynamic writes) against MatMulNBits (the drafters'
int8 products: 8 bits in blocks of 32, accuracy level 4) and float32, 1 and 8 rows through the
30 chained [576, 3072] products of matmul_chain.py; 2 threads spinning, min of 3 blocks of 20.
Run on 2026-11-29 (onnxruntime 1.31.1, an AMD EPYC):
    flock -x /tmp/specdec-cpu.lock python bench/results/dynamic_quantize_matmul_probe.py
Output: bench/results/dynamic_quantize_matmul_probe-20261129.txt (docs/design/int8-drafter.md)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from matmul_chain import K, LAYERS, N, call_ms, chain, session


def dynamic_chain() -> onnx.ModelProto:
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        w = (np.random.randn(K, N) * 0.02).astype(np.float32)
        scale = (np.abs(w).max(0) / 127).astype(np.float32)
        inits += [numpy_helper.from_array(np.round(w / scale).astype(np.int8), f"w{i}"), numpy_helper.from_array(scale, f"scale{i}"), numpy_helper.from_array(np.zeros(N, np.int8), f"zero{i}")]
        nodes.append(helper.make_node("DynamicQuantizeMatMul", [x, f"w{i}", f"scale{i}", f"zero{i}"], [f"y{i}"], domain="com.microsoft"))
        for name, value in (("s", 0), ("e", K), ("a", 1)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", [f"y{i}", f"s{i}", f"e{i}", f"a{i}"], [f"z{i}"]))
        x = f"z{i}"
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["M", K]) for name in ("x", x)]
    model = helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:], inits), opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model


def main() -> None:
    base = chain()
    quantizer = MatMulNBitsQuantizer(onnx.ModelProto.FromString(base.SerializeToString()), bits=8, block_size=32, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    sessions = {"float32": session(base), "MatMulNBits 8 bits": session(quantizer.model.model), "DynamicQuantizeMatMul": session(dynamic_chain())}
    times: dict = {}
    for _ in range(3):
        for name, s in sessions.items():
            for rows in (1, 8):
                times.setdefault((name, rows), []).append(call_ms(s, np.random.randn(rows, K).astype(np.float32)))
    for (name, rows), values in times.items():
        print(f"{name} rows {rows}: {min(values):6.2f} ms")


if __name__ == "__main__":
    main()

"""onnxruntime's MatMulNBits (the drafters' int8 products) on this CPU: 1 and 8 rows through 30
[576, 3072] products quantized by MatMulNBitsQuantizer at 8 and 4 bits, blocks of 32 and 128,
int8 products (accuracy level 4) or float32 ones (0); 2 threads spinning, min of 3 blocks of 20.
Run on 2026-11-28 (onnxruntime 1.31.1, an AMD EPYC):
    flock -x /tmp/specdec-cpu.lock python bench/results/matmul_nbits_probe.py
Output: bench/results/matmul_nbits_probe-20261128.txt (docs/design/int8-drafter.md)."""
import time, numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
LAYERS, K, N = 30, 576, 3072
def chain():
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        inits.append(numpy_helper.from_array((np.random.randn(K, N) * 0.02).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"y{i}"]))
        for name, value in (("s", 0), ("e", K), ("a", 1)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", [f"y{i}", f"s{i}", f"e{i}", f"a{i}"], [f"z{i}"]))
        x = f"z{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])], [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["M", K])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 9
    return m
base = chain()
sessions = {}
for bits, block, acc in ((8, 32, 4), (8, 128, 4), (4, 32, 4), (4, 128, 4), (8, 32, 0)):
    q = MatMulNBitsQuantizer(onnx.ModelProto.FromString(base.SerializeToString()), bits=bits, block_size=block, is_symmetric=True, accuracy_level=acc)
    q.process()
    o = ort.SessionOptions(); o.intra_op_num_threads = 2
    o.add_session_config_entry("session.intra_op.allow_spinning", "1")
    sessions[(bits, block, acc)] = ort.InferenceSession(q.model.model.SerializeToString(), o, providers=["CPUExecutionProvider"])
res = {}
for rep in range(3):
    for key, s in sessions.items():
        for M in (1, 8):
            x = np.random.randn(M, K).astype(np.float32)
            for _ in range(3): s.run(None, {"x": x})
            t = time.perf_counter()
            for _ in range(20): s.run(None, {"x": x})
            res.setdefault((key, M), []).append((time.perf_counter() - t) / 20 * 1e3)
for (key, M), v in sorted(res.items()):
    bits = key[0]
    mb = LAYERS * K * N * bits / 8 / 1e6
    print(f"bits {key[0]} block {key[1]:3d} acc {key[2]} rows {M}: {min(v):6.2f} ms ({mb / min(v):.1f} GB/s of packed weights)")

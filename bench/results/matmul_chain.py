"""The graph the matmul probes time (matmul_rows_probe.py, matmul_transposed_probe.py,
matmul_nbits_probe.py, dynamic_quantize_matmul_probe.py): LAYERS float32 products [K, N]
chained, each output sliced back to K so that the chain continues; more weights (212 MB) than
the caches hold; and the session they run it in."""
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

LAYERS, K, N = 30, 576, 3072


def chain(transposed: bool = False) -> onnx.ModelProto:
    """x [M, K] through x @ W (W constant [K, N]), or with `transposed` x [K, M] through W^T @ x
    (W^T constant [N, K]: the weights as MLAS's unpacked A matrix, the rows packed as B)."""
    nodes, inits, x = [], [], "x"
    axis = 0 if transposed else 1
    for i in range(LAYERS):
        w = (np.random.randn(K, N) * 0.02).astype(np.float32)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T) if transposed else w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"w{i}", x] if transposed else [x, f"w{i}"], [f"y{i}"]))
        for name, value in (("s", 0), ("e", K), ("a", axis)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}{i}"))
        nodes.append(helper.make_node("Slice", [f"y{i}", f"s{i}", f"e{i}", f"a{i}"], [f"z{i}"]))
        x = f"z{i}"
    shape = [K, "M"] if transposed else ["M", K]
    io = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in ("x", x)]
    model = helper.make_model(helper.make_graph(nodes, "g", io[:1], io[1:], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """An onnxruntime CPU session over `model` on 2 threads, spinning between nodes."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def call_ms(session, x: np.ndarray, calls: int = 20) -> float:  # type: ignore[no-untyped-def]
    """Milliseconds a call of `session` (an onnxruntime session over a chain) on `x`, over
    `calls` calls after 3 to warm up."""
    for _ in range(3):
        session.run(None, {"x": x})
    start = time.perf_counter()
    for _ in range(calls):
        session.run(None, {"x": x})
    return (time.perf_counter() - start) / calls * 1000

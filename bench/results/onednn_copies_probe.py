"""Probe (2026-11-29): the default model's 211 linear weights (random values of its shapes)
multiplied by M rows, one product each, in four ways in one process: F.linear (torch's MKL),
weight first (mm of W by x^T, as linear_layout.weight_first_linear), torch's oneDNN linear op on
weights reordered into its layout (linear_layout.onednn_copy), onnxruntime's MatMul (MLAS) on one
graph of all 211 products. Medians of 7 after one warm-up, ms. docs/design/onednn-copies.md.

    flock -x /tmp/specdec-cpu.lock python bench/results/onednn_copies_probe.py
"""

import statistics
import time

import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

HIDDEN, INTERMEDIATE, KV, VOCAB, LAYERS = 576, 1536, 192, 49152, 30
SHAPES = [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (INTERMEDIATE, HIDDEN), (INTERMEDIATE, HIDDEN), (HIDDEN, INTERMEDIATE)] * LAYERS + [(VOCAB, HIDDEN)]


def median_ms(fn, repeats: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def onnx_session(weights: list[torch.Tensor]) -> ort.InferenceSession:
    nodes, inits, outputs = [], [], []
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w.t().contiguous().numpy(), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"x{w.shape[1]}", f"w{i}"], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    inputs = [helper.make_tensor_value_info(f"x{n}", TensorProto.FLOAT, ["M", n]) for n in (HIDDEN, INTERMEDIATE)]
    model = helper.make_model(helper.make_graph(nodes, "products", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    torch.manual_seed(0)
    weights = [torch.randn(o, i) * 0.05 for o, i in SHAPES]
    copies = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in weights]
    session = onnx_session(weights)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, onnxruntime {ort.__version__}")
    print("| M rows | F.linear | weight first | oneDNN copies | onnxruntime MatMul |")
    print("|---|---|---|---|---|")
    for rows in (1, 2, 4, 8, 16, 32, 64, 128, 512):
        x = {n: torch.randn(rows, n) for n in (HIDDEN, INTERMEDIATE)}
        linear = median_ms(lambda: [F.linear(x[w.shape[1]], w) for w in weights])
        first = median_ms(lambda: [torch.mm(w, x[w.shape[1]].t()) for w in weights])
        onednn = median_ms(lambda: [torch.ops.mkldnn._linear_pointwise(x[w.shape[1]], c, None, "none", [], "") for w, c in zip(weights, copies)])
        feed = {f"x{n}": x[n].numpy() for n in (HIDDEN, INTERMEDIATE)}
        onnx = median_ms(lambda: session.run(None, feed))
        print(f"| {rows} | {linear:.1f} | {first:.1f} | {onednn:.1f} | {onnx:.1f} |", flush=True)


if __name__ == "__main__":
    main()

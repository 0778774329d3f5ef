"""Probe (2026-11-29): what the int8-bounded greedy head's nodes (verifier_svc/backends/greedy_filter.py)
cost for 1-16 rows against onnxruntime's float32 MatMul of a head of the default model's shape
(random weights), 2 threads, the sizes in turns, medians of 3 turns of 25 calls. Decided
GREEDY_ROWS in verifier_svc/backends/onnx_passes.py.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/greedy_head_rows_probe.py
Output: bench/results/greedy_head_rows_probe-20261129.txt (docs/design/greedy-head.md)."""
import time, statistics, numpy as np, onnxruntime as ort, torch
from onnx import helper, TensorProto, numpy_helper
from specdec.onnx_threads import session_options
from verifier_svc.backends.greedy_filter import add_greedy_filter
from verifier_svc.greedy_head import greedy_head_tables
N, K = 49152, 576
rng = np.random.default_rng(0)
W = torch.from_numpy(rng.standard_normal((N, K)).astype(np.float32) * 0.05)
def session(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]); m.ir_version = 9
    return ort.InferenceSession(m.SerializeToString(), session_options(2), providers=["CPUExecutionProvider"])
g = helper.make_graph([], "f", [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, "k", K])], [])
add_greedy_filter(g, greedy_head_tables(W), "rows", "candidates")
fs = session(g)
hs = session(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "h", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, K])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, N])], [numpy_helper.from_array(W.t().contiguous().numpy(), "w")]))
def tm(f, n=25):
    for _ in range(3): f()
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
res = {}
for turn in range(3):
    for m in (1, 2, 4, 8, 16):
        x = rng.standard_normal((1, m, K)).astype(np.float32)
        res.setdefault(("filter", m), []).append(tm(lambda: fs.run(["candidates"], {"rows": x})))
        res.setdefault(("fp32", m), []).append(tm(lambda: hs.run(None, {"x": x[0]})))
for m in (1, 2, 4, 8, 16):
    print(m, "rows: filter", round(statistics.median(res[("filter", m)]), 2), "fp32 head", round(statistics.median(res[("fp32", m)]), 2))

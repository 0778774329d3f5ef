"""Probe (2026-12-02): the int8 drafter's graph as onnxruntime optimizes it (364 nodes), with
each residual Add and the SimplifiedLayerNormalization after it fused into one
SkipSimplifiedLayerNormalization (304 nodes), written to OUT as a drafter folder; time both with
drafter_step_probe.py in turns.

    python bench/results/skip_norm_fusion_probe.py DRAFTER_FOLDER OUT
Output: bench/results/drafter_step_probe-20261202.txt (docs/design/int8-drafter.md)."""
import sys, collections, shutil
from pathlib import Path
import onnx, onnxruntime as ort
from onnx import helper
src, out = Path(sys.argv[1]), Path(sys.argv[2]); out.mkdir(exist_ok=True)
shutil.copy(src / "manifest.json", out / "manifest.json")
opts = ort.SessionOptions(); opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
opts.optimized_model_filepath = str(out / "opt.onnx")
opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", "opt.onnx.data")
opts.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
ort.InferenceSession(str(src / "model.onnx"), opts, providers=["CPUExecutionProvider"])
m = onnx.load(str(out / "opt.onnx"))
g = m.graph
print("optimized:", len(g.node), collections.Counter(n.op_type for n in g.node).most_common(12))
producer = {o: n for n in g.node for o in n.output}
consumers = collections.defaultdict(list)
for n in g.node:
    for i in n.input: consumers[i].append(n)
fused = 0; remove = set(); new_nodes = {}
for n in g.node:
    if n.op_type != "SimplifiedLayerNormalization": continue
    add = producer.get(n.input[0])
    if add is None or add.op_type != "Add": continue
    eps = [a for a in n.attribute if a.name == "epsilon"]
    s = add.output[0]
    f = helper.make_node("SkipSimplifiedLayerNormalization", [add.input[0], add.input[1], n.input[1]], [n.output[0], "", "", s],
                         domain="com.microsoft", epsilon=eps[0].f if eps else 1e-5, name=n.name + "_skip")
    remove.add(id(add)); new_nodes[id(n)] = f; fused += 1
nodes = [new_nodes.get(id(n), n) for n in g.node if id(n) not in remove]
del g.node[:]; g.node.extend(nodes)
if not any(o.domain == "com.microsoft" for o in m.opset_import):
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
onnx.save(m, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
print("fused", fused, "nodes now", len(g.node))

# The cost of a float32 MatMul by its rows in onnxruntime (MLAS): 30 matrices [576, 3072] (212 MB,
# more than the caches), chained, 2 threads; min of 3 blocks of 20 calls. Run at c3b0f27 on 2026-11-28:
#     flock -x /tmp/specdec-cpu.lock python bench/results/matmul_rows_probe.py
# Output: bench/results/matmul_rows_probe-20261128.txt (docs/design/onnx-passes.md, "Not yet").
import numpy as np, onnx, onnxruntime as ort, time
from onnx import helper, TensorProto, numpy_helper
L=30; K=576; N=3072
nodes=[]; inits=[]
x="x"
for i in range(L):
    w=np.random.randn(K,N).astype(np.float32)*0.02
    inits.append(numpy_helper.from_array(w, f"w{i}"))
    nodes.append(helper.make_node("MatMul",[x,f"w{i}"],[f"y{i}"]))
    # slice back to K columns so chain continues
    inits.append(numpy_helper.from_array(np.array([0],np.int64), f"s{i}")); inits.append(numpy_helper.from_array(np.array([K],np.int64), f"e{i}")); inits.append(numpy_helper.from_array(np.array([1],np.int64), f"a{i}"))
    nodes.append(helper.make_node("Slice",[f"y{i}",f"s{i}",f"e{i}",f"a{i}"],[f"z{i}"]))
    x=f"z{i}"
g=helper.make_graph(nodes,"g",[helper.make_tensor_value_info("x",TensorProto.FLOAT,["M",K])],[helper.make_tensor_value_info(x,TensorProto.FLOAT,["M",K])],inits)
m=helper.make_model(g,opset_imports=[helper.make_opsetid("",17)]); m.ir_version=9
onnx.save(m,"/tmp/mm.onnx")
o=ort.SessionOptions(); o.intra_op_num_threads=2
s=ort.InferenceSession("/tmp/mm.onnx",o,providers=["CPUExecutionProvider"])
res={}
for rep in range(3):
  for M in (1,2,4,8,16):
    xx=np.random.randn(M,K).astype(np.float32)
    for _ in range(3): s.run(None,{"x":xx})
    t=time.perf_counter(); n=20
    for _ in range(n): s.run(None,{"x":xx})
    res.setdefault(M,[]).append((time.perf_counter()-t)/n*1000)
for M,v in res.items(): print(M, "%.2f ms (%.1f GB/s)" % (min(v), L*K*N*4/min(v)/1e6))

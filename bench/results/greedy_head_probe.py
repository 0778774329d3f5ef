"""Probe (2026-11-29): the int8-bounded greedy head (verifier_svc/greedy_head.py, its nodes
backends/greedy_filter.py) on the default model. Over the target's own greedy steps and every
prompt position of three chat prompts, and over the 256 ids 1000-1255 that `bench.engine` decodes
after and 60 greedy steps from there: how many candidates the bound keeps a row, how much of the
bound the error used, whether any argmax differs from the float32 head's. Then, in turns of
blocks, the filter's nodes alone (onnxruntime, 2 threads) against onnxruntime's float32 MatMul of
the head (what the step graph runs without it), one row each.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/greedy_head_probe.py
Output: bench/results/greedy_head_probe-20261129.txt (docs/design/greedy-head.md)."""
import statistics
import time

import numpy as np
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper
from transformers import AutoModelForCausalLM

from specdec.model_files import tokenizer_dir
from specdec.onnx_threads import session_options
from specdec.tokenizer import Tokenizer
from verifier_svc.backends.greedy_filter import PREFIX, add_greedy_filter
from verifier_svc.greedy_head import greedy_head_tables, rescored
from verifier_svc.model_loader import model_dir

torch.set_num_threads(2)
model = AutoModelForCausalLM.from_pretrained(str(model_dir("default")), dtype=torch.float32).eval()
weight = model.lm_head.weight.detach()
vocab, width = weight.shape


def session(graph: helper.GraphProto):  # type: ignore[no-untyped-def]
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 9
    return ort.InferenceSession(onnx_model.SerializeToString(), session_options(2), providers=["CPUExecutionProvider"])


rows_input = helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, "k", width])
graph = helper.make_graph([], "filter", [rows_input], [])
add_greedy_filter(graph, greedy_head_tables(weight), "rows", "candidates")
graph.output.extend(helper.make_tensor_value_info(PREFIX + v, TensorProto.FLOAT, ["k", vocab]) for v in ("approx", "bound"))
filter_session = session(graph)
head_session = session(helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, vocab])], [numpy_helper.from_array(weight.t().contiguous().numpy(), "w")],
))

tokenizer = Tokenizer(tokenizer_dir("default"))
chat = [
    tokenizer.encode_chat([{"role": "user", "content": prompt}]) for prompt in (
        "Write a short story about a lighthouse keeper and explain how lighthouses work.",
        "What is 17 times 23? Explain step by step.",
        "Write a python function that reverses a list.",
    )
]
sets = {"chat prompts and their greedy steps": (chat, 80), "ids 1000-1255 and 60 greedy steps": ([[1000 + i for i in range(256)]], 60)}
with torch.inference_mode():
    for name, (prompts, steps) in sets.items():
        rows = []
        for ids in prompts:
            out = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False, output_hidden_states=True, return_dict_in_generate=True)
            rows += list(out.hidden_states[0][-1][0]) + [states[-1][0, -1] for states in out.hidden_states[1:]]
        counts, used, differ = [], 0.0, 0
        for h in rows:
            candidates, approx, bound = filter_session.run(["candidates", PREFIX + "approx", PREFIX + "bound"], {"rows": h[None, None].numpy()})
            full = torch.mv(weight, h)
            used = max(used, float((np.abs(approx[0] - full.numpy()) / bound[0]).max()))
            logits = rescored(weight.numpy(), h[None].numpy(), candidates)
            counts.append(int(candidates.sum()))
            differ += int(logits.argmax() != full.argmax())
        counts.sort()
        print(f"{name}: {len(counts)} rows; argmax differs from the float32 head's in {differ}; the error used at most {used:.3f} of the bound")
        print(f"  candidates a row: median {counts[len(counts) // 2]}, 90th percentile {counts[int(len(counts) * 0.9)]}, max {counts[-1]}")


def block(fn, calls: int = 30) -> list[float]:
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


h = rows[50][None].numpy()
cases = {
    "onnxruntime float32 head, 1 row": lambda: head_session.run(None, {"x": h}),
    "int8-bounded head's nodes, 1 row": lambda: filter_session.run(["candidates"], {"rows": h[None]}),
}
times = {name: [] for name in cases}
for _ in range(8):
    for name, fn in cases.items():
        times[name] += block(fn)
for name, t in times.items():
    print(f"{name:34s} median {1e3 * statistics.median(t):5.2f} ms, min {1e3 * min(t):5.2f}")

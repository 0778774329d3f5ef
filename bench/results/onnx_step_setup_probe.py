"""Probe (2026-11-29): the verifier's onnxruntime step (one-token passes of the default model after
256 cached tokens, through TargetModel.score) against another session of a step, blocks of 10
timed calls (after 3 untimed) taking turns, 10 turns; median and minimum ms. Two changes were
measured with it and not taken (docs/design/onnx-passes.md): each residual add fused with the
norm after it, and sessions without memory patterns.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/onnx_step_setup_probe.py MODE [--grow] [--llama]

MODE:
- `--fuse`: the served graph rewritten, each residual Add and the SimplifiedLayerNormalization
  after it one SkipSimplifiedLayerNormalization (364 nodes -> 304);
- `--other PATH`: another kept step (`step.onnx` in the store; in the committed output, the
  served step was a build of llama_graph.py writing those fused nodes itself, the other the
  graph as it is);
- `--same --mem-pattern`: the served step in a second session with memory patterns switched
  from the served session's setting (onnxruntime keeps one pattern per set of input shapes, and a
  decoding step's shapes change with every call). specdec's sessions keep onnxruntime's default
  (on); in the committed output the served session had them off and the second on.

`session.KEY=VALUE`: a session configuration entry for the second session. `--fresh`: both
sessions made by the probe (the served step's too: a session made later ran 3-5% faster than the
verifier's own in two runs of `--same`), the other one first with `--swap`.

`--grow`: the cache grows a token a call (back to 256 past 900), as in decoding, instead of
staying at 256 (then every call has the same input shapes). `--llama`: llama.cpp's F32 one-token
step as a third system.
"""

from __future__ import annotations

import collections
import statistics
import sys
import tempfile
import time
import weakref
from collections.abc import Callable

import onnx
import onnxruntime as ort
import torch
from onnx import helper

from bench.engine import prefilled
from specdec.onnx_threads import session_options
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.token_tree import chain

CONTEXT = 256


def fused(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each Add feeding a SimplifiedLayerNormalization and the norm as one fused node."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    uses = collections.Counter(name for node in graph.node for name in node.input)
    dropped, replaced = set(), {}
    for node in graph.node:
        add = producer.get(node.input[0]) if node.op_type == "SimplifiedLayerNormalization" else None
        if add is None or add.op_type != "Add":
            continue
        epsilon = next(a.f for a in node.attribute if a.name == "epsilon")
        total = add.output[0] if uses[add.output[0]] > 1 else ""
        dropped.add(id(add))
        replaced[id(node)] = helper.make_node(
            "SkipSimplifiedLayerNormalization", [add.input[0], add.input[1], node.input[1]], [node.output[0], "", "", total],
            domain="com.microsoft", epsilon=epsilon, name=f"{node.name}_skip",
        )
    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def main() -> None:
    target, _ = load_target(VerifierSettings(model="default", device="cpu", dtype="float32"))
    passes = target.backend.onnx
    assert passes is not None and passes.folder is not None
    served = passes.session
    options = session_options(served.get_session_options().intra_op_num_threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # kept steps are optimized
    served_file = str(passes.folder / "step.onnx")
    if "--mem-pattern" in sys.argv:
        options.enable_mem_pattern = not options.enable_mem_pattern
    for entry in [a.split("=", 1) for a in sys.argv if a.startswith("session.")]:
        options.add_session_config_entry(*entry)
    if "--other" in sys.argv:
        path = sys.argv[sys.argv.index("--other") + 1]
    elif "--fuse" in sys.argv:
        path = f"{tempfile.mkdtemp()}/fused.onnx"
        onnx.save(fused(onnx.load(served_file)), path, save_as_external_data=True, location="fused.onnx.data")
    else:
        path = served_file
    for name, file in (("served", served_file), ("other", path)):
        print(name, file, dict(collections.Counter(n.op_type for n in onnx.load(file, load_external_data=False).graph.node)))
    if "--fresh" in sys.argv:  # the served step in a new session of its own too, made second with --swap
        plain = session_options(served.get_session_options().intra_op_num_threads)
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        made = [("served", served_file, plain), ("other", path, options)]
        sessions = dict((name, ort.InferenceSession(file, opts, providers=["CPUExecutionProvider"])) for name, file, opts in (made[::-1] if "--swap" in sys.argv else made))
    else:
        sessions = {"served": served, "other": ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])}
    cache = prefilled(target, 1, CONTEXT)[0]

    def step(session) -> Callable[[], torch.Tensor]:  # type: ignore[no-untyped-def]
        def call() -> torch.Tensor:
            passes.session, passes._bindings = session, weakref.WeakKeyDictionary()
            logits = target.score(cache, [5000], chain([]))
            if "--grow" not in sys.argv or len(cache) > 900:
                cache.truncate(CONTEXT)
            return logits
        return call

    systems = {name: step(session) for name, session in sessions.items()}
    a, b = systems["served"]()[0], systems["other"]()[0]
    print(f"max logit difference {float((a - b).abs().max()):.3g}, same argmax {int(a.argmax()) == int(b.argmax())}", flush=True)
    if "--llama" in sys.argv:
        import llama_cpp

        from bench.llama_cpp_peers import retyped_gguf
        from specdec.model_files import default_gguf

        llm = llama_cpp.Llama(str(retyped_gguf(default_gguf(), "float32")), n_ctx=1024, n_threads=torch.get_num_threads(), verbose=False)
        llm.eval([1000 + i for i in range(CONTEXT)])

        def llama_one() -> None:
            llm.eval([5000])
            llm.n_tokens -= 1

        systems["llama.cpp F32"] = llama_one  # type: ignore[assignment]
    times: dict[str, list[float]] = {name: [] for name in systems}
    for turn in range(10):
        for name in list(systems) if turn % 2 == 0 else list(systems)[::-1]:
            for _ in range(3):
                systems[name]()
            for _ in range(10):
                began = time.perf_counter()
                systems[name]()
                times[name].append(time.perf_counter() - began)
    for name, seconds in times.items():
        print(f"{name}: median {1000 * statistics.median(seconds):.2f} ms, min {1000 * min(seconds):.2f}")


if __name__ == "__main__":
    main()

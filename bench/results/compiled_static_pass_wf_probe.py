"""Lone passes of 1 and 4 tokens after 256 cached ones, in turns: the served eager pass (weight
first), the same with the model's norms and MLPs compiled (backends/compiled_blocks.py), and the
static pass over a 512-key slot compiled by inductor without freezing, its linear layers weight
first (`static`; `static-cpp`: with inductor's C++ wrapper). Run from a checkout:

    flock -x /tmp/specdec-cpu.lock env OPENBLAS_NUM_THREADS=1 python bench/results/compiled_static_pass_wf_probe.py blocks static
"""
import os, sys, time, statistics
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch
torch.set_num_threads(2)
sys.path.insert(0, os.getcwd())
from specdec.model_files import DEFAULT_MODEL
from verifier_svc.model_loader import open_model
from verifier_svc.target_model import TargetModel
from verifier_svc.static_pass import SlotPasses
from verifier_svc.layer_masks import layer_windows
from verifier_svc.backends.compiled_blocks import CompiledBlocks
from verifier_svc.token_tree import chain

which = sys.argv[1:] or ["blocks", "static"]
model, _ = open_model(DEFAULT_MODEL, "cpu", torch.float32)
eager = TargetModel(model, "e"); eager.backend.weight_first = True
prompt = [1000 + i for i in range(256)]
ce = eager.new_cache(); eager.score(ce, prompt, chain([]))
SIZES = (1, 4)
systems = {"eager wf": (eager, ce, None)}
if "blocks" in which:
    blocks = CompiledBlocks(model)
    t0 = time.perf_counter()
    with blocks.active():
        for n in SIZES:
            for _ in range(2):
                eager.score(ce, [5], chain(list(range(6, 5 + n)))); ce.truncate(256)
    print(f"blocks compile {time.perf_counter()-t0:.1f}s", flush=True)
    systems["blocks"] = (eager, ce, blocks)
for variant in [w for w in which if w.startswith("static")]:
    options = {"cpp_wrapper": True} if variant == "static-cpp" else {}
    class Compiled:
        def __init__(self, static):
            self.static = static
            self.fn = torch.compile(static.forward, dynamic=False, options=options)
        def run(self):
            return self.fn()
    passes = SlotPasses(model, layer_windows(model.config), 1, 4096, SIZES, Compiled, min_keys=512)
    comp = TargetModel(model, "c"); comp.backend.weight_first = True
    comp.backend.lone_pass = passes.runner
    cc = passes.new_cache(); comp.score(cc, prompt, chain([]))
    for n in SIZES:
        t0 = time.perf_counter()
        for _ in range(2):
            comp.score(cc, [5], chain(list(range(6, 5 + n)))); cc.truncate(256)
        print(f"{variant} compile n={n} {time.perf_counter()-t0:.1f}s", flush=True)
    systems[variant] = (comp, cc, None)
import contextlib
res = {}
for turn in range(10):
    for n in SIZES:
        for name, (t, c, b) in systems.items():
            with (b.active() if b else contextlib.nullcontext()):
                s = time.perf_counter(); t.score(c, [5], chain(list(range(6, 5 + n)))); e = time.perf_counter(); c.truncate(256)
            res.setdefault((name, n), []).append(e - s)
for k, v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(k, f"min {1000*min(v):.1f} median {1000*statistics.median(v):.1f} ms")
ref = eager.score(ce, [5], chain([6, 7, 8])); ce.truncate(256)
for name, (t, c, b) in systems.items():
    with (b.active() if b else contextlib.nullcontext()):
        out = t.score(c, [5], chain([6, 7, 8])); c.truncate(256)
    print(name, "max diff", (out - ref).abs().max().item(), "argmax same", bool((out.argmax(-1) == ref.argmax(-1)).all()))

"""Compile count/time and pass speed: StaticPass.forward compiled with automatic dynamic shapes
(as served) against dynamic=True from the first compile; eager pass as reference. Run from a checkout."""
import os, sys, time, statistics, contextlib
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch, torch._dynamo
torch.set_num_threads(2)
sys.path.insert(0, os.getcwd())
from specdec.model_files import DEFAULT_MODEL
from verifier_svc.model_loader import open_model
from verifier_svc.target_model import TargetModel
from verifier_svc.static_pass import SlotPasses, StaticPass
from verifier_svc.layer_masks import layer_windows
from verifier_svc.token_tree import chain
from verifier_svc.backends.cpu_compiled import compiles

torch._dynamo.config.recompile_limit = 64
variants = sys.argv[1:] or ["auto", "dynamic"]
model, _ = open_model(DEFAULT_MODEL, "cpu", torch.float32)
eager = TargetModel(model, "e"); eager.backend.weight_first = True
prompt = [1000 + i for i in range(256)]
ce = eager.new_cache(); eager.score(ce, prompt, chain([]))
SIZES = (1, 2, 4, 8)
systems = {"eager": (eager, ce)}

def fwd_dynamic(static):
    return static.forward()

for variant in variants:
    fn = torch.compile(StaticPass.forward) if variant == "auto" else torch.compile(fwd_dynamic, dynamic=True)
    class Runner:
        def __init__(self, static):
            self.static = static
            with eager.backend.kernels(), torch.inference_mode():
                fn(static)
        def run(self):
            return fn(self.static)
    c0, t0 = compiles(), time.perf_counter()
    passes = SlotPasses(model, layer_windows(model.config), 2, 4096, SIZES, Runner, min_keys=512)
    passes.prepare()
    print(f"{variant}: {len(passes.runners)} runners, {compiles()-c0} compiles, {time.perf_counter()-t0:.1f} s", flush=True)
    comp = TargetModel(model, variant); comp.backend.weight_first = True
    comp.backend.lone_pass = passes.runner
    cc = passes.new_cache(); comp.score(cc, prompt, chain([]))
    systems[variant] = (comp, cc)
res = {}
for turn in range(8):
    for n in SIZES:
        for name, (t, c) in systems.items():
            s = time.perf_counter(); t.score(c, [5], chain(list(range(6, 5 + n)))); e = time.perf_counter(); c.truncate(256)
            res.setdefault((name, n), []).append(e - s)
for k, v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(k, f"min {1000*min(v):.1f} median {1000*statistics.median(v):.1f} ms")
ref = eager.score(ce, [5], chain([6, 7, 8])); ce.truncate(256)
for name, (t, c) in systems.items():
    out = t.score(c, [5], chain([6, 7, 8])); c.truncate(256)
    print(name, "max diff", (out - ref).abs().max().item(), "argmax same", bool((out.argmax(-1) == ref.argmax(-1)).all()))
print("compiles after timing", compiles())

import os, sys, time, statistics
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch
torch.set_num_threads(2)
from verifier_svc.model_loader import open_model
from verifier_svc.target_model import TargetModel
from verifier_svc.static_pass import SlotPasses, EagerRunner, StaticPass
from verifier_svc.layer_masks import layer_windows
from verifier_svc.token_tree import chain
import torch._inductor.config as inductor
inductor.freezing = True
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
keys = int(sys.argv[2]) if len(sys.argv) > 2 else 512
model, _ = open_model("default", "cpu", dtype)
eager = TargetModel(model, "e")
eager.backend.weight_first = True
class Compiled:
    def __init__(self, static):
        self.static = static
        self.fn = torch.compile(static.forward, dynamic=False)
    def run(self):
        return self.fn()
t0 = time.perf_counter()
passes = SlotPasses(model, layer_windows(model.config), 1, 4096, (1, 8), Compiled, min_keys=keys)
comp = TargetModel(model, "c")
comp.backend.weight_first = False
cache_c = passes.new_cache()
class B: pass
comp.backend.lone_pass = passes.runner
comp.backend.new_cache = passes.new_cache
ce = eager.new_cache()
prompt = [1000 + i for i in range(256)]
eager.score(ce, prompt, chain([]))
comp.score(cache_c, prompt, chain([]))
for n in (1, 8):
    t = time.perf_counter()
    comp.score(cache_c, [5], chain(list(range(6, 6 + n - 1)))); cache_c.truncate(256)
    comp.score(cache_c, [5], chain(list(range(6, 6 + n - 1)))); cache_c.truncate(256)
    print(f"compile n={n} {time.perf_counter() - t:.1f}s", flush=True)
res = {}
for turn in range(8):
    for n in (1, 8):
        for name, t, c in (("eager wf", eager, ce), ("compiled", comp, cache_c)):
            s = time.perf_counter(); l = t.score(c, [5], chain(list(range(6, 6 + n - 1)))); res.setdefault((name, n), []).append(time.perf_counter() - s); c.truncate(256)
for k, v in res.items():
    print(k, f"min {1000*min(v):.1f} median {1000*statistics.median(v):.1f} ms")
a = eager.score(ce, [5], chain([6,7,8])); ce.truncate(256)
b = comp.score(cache_c, [5], chain([6,7,8])); cache_c.truncate(256)
print("max diff", (a-b).abs().max().item())

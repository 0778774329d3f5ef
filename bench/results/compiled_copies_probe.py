"""Lone passes of the default model, in one process, turns alternated: eager and compiled (stored
compiles), each with and without one-row copies. Prints median (min) ms for 1 and 4 tokens."""
import statistics, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
from verifier_svc.backends.stored_steps import default_store
from verifier_svc.model_loader import open_model
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain

turns = int(sys.argv[1]) if len(sys.argv) > 1 else 15
systems = {}
for name, compiled, copies in (("eager, copies", False, True), ("compiled, copies", True, True), ("eager, no copies", False, False), ("compiled, no copies", True, False)):
    model, _ = open_model("default", "cpu", torch.float32)
    t = time.perf_counter()
    target = TargetModel(model, name, compiled_passes=compiled, one_row_copies=copies, compiled_store=default_store())
    target.backend.prepare(target)
    print(f"{name}: ready in {time.perf_counter() - t:.1f} s", flush=True)
    systems[name] = target
prompt = [1000 + i for i in range(256)]
caches = {}
for name, target in systems.items():
    caches[name] = target.new_cache()
    target.score(caches[name], prompt, chain([]))
times = {(name, n): [] for name in systems for n in (1, 4)}
def one(name, n):
    target, cache = systems[name], caches[name]
    started = time.perf_counter()
    target.score(cache, [5000], chain([6000 + j for j in range(n - 1)]))
    elapsed = time.perf_counter() - started
    cache.truncate(256)
    return elapsed
for name in systems:
    for n in (1, 4):
        one(name, n); one(name, n)
for turn in range(turns):
    order = list(systems) if turn % 2 == 0 else list(reversed(systems))
    for name in order:
        for n in (1, 4):
            times[name, n].append(one(name, n))
for name in systems:
    print(name, " | ".join(f"{n} token(s) {1000 * statistics.median(times[name, n]):.1f} ({1000 * min(times[name, n]):.1f})" for n in (1, 4)))
print("compiled runs:", {name: t.backend.pass_counts() for name, t in systems.items()})

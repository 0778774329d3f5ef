"""Lone passes of 1, 2, 4 and 8 tokens after 256 cached ones, in turns: the served eager pass
(weight first); the static pass with each decoder layer compiled (`layers`: regional
compilation, one compiled function for every layer, each layer handed its own slot layer as its
cache so no layer index is baked in); the whole static pass compiled as one function (`whole`:
what `--cpu-compiled-passes` serves, backends/cpu_compiled.py); `layers-skip-guards`: the layers run under
torch.compiler.set_stance(skip_guard_eval_unsafe=True) (dynamo then checks only the guards that
tell its compiled entries apart); `groups`: GROUP (env, default 5) consecutive layers a compiled
call. For each compiled system: compiles and seconds to
prepare every shape of 2 slots (inductor's on-disk cache may hold earlier compiles: clear
/tmp/torchinductor_$USER for cold ones). Run from a checkout:

    flock -x /tmp/specdec-cpu.lock env OPENBLAS_NUM_THREADS=1 python bench/results/compiled_layers_probe.py layers whole
"""
import os, sys, time, statistics
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch
torch.set_num_threads(2)
sys.path.insert(0, os.getcwd())
from specdec.model_files import DEFAULT_MODEL
from verifier_svc.model_loader import open_model
from verifier_svc.target_model import TargetModel
import contextlib
from verifier_svc.static_pass import SlotPasses, StaticPass, _SlotCache
from verifier_svc.layer_masks import layer_windows
from verifier_svc.token_tree import chain
from verifier_svc.backends.cpu_compiled import compiles


def layer_step(layer, cache_argument, cache, *args, **kwargs):
    kwargs[cache_argument] = cache  # the layer's own _SlotLayer: its update ignores the layer index
    return layer.forward(*args, **kwargs)


compiled_step = torch.compile(layer_step)


class CompiledLayers:
    def __init__(self, model):
        count = model.config.num_hidden_layers
        self.layers = list(next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count))
        self.calls = [self._call(i, layer) for i, layer in enumerate(self.layers)]

    @staticmethod
    def _call(index, layer):
        def call(*args, **kwargs):
            name = next(key for key, value in kwargs.items() if isinstance(value, _SlotCache))
            return compiled_step(layer, name, kwargs.pop(name).layers[index], *args, **kwargs)
        return call

    @contextlib.contextmanager
    def active(self):
        for layer, call in zip(self.layers, self.calls):
            layer._compiled_call_impl = call
        try:
            yield
        finally:
            for layer in self.layers:
                layer._compiled_call_impl = None


def group_step(layers, cache_argument, caches, hidden, *args, **kwargs):
    for layer, cache in zip(layers, caches):
        kwargs[cache_argument] = cache
        hidden = layer.forward(hidden, *args, **kwargs)
    return hidden


compiled_group = torch.compile(group_step)
GROUP = int(os.environ.get("GROUP", "5"))


class CompiledGroups(CompiledLayers):
    """`groups`: GROUP consecutive layers a compiled call (same masks for all: models whose
    layers share one attention kind only); the call of a group's first layer runs the group,
    the others pass their input on."""

    def __init__(self, model):
        super().__init__(model)
        self.calls = [self._group_call(i, self.layers) for i in range(len(self.layers))]

    @staticmethod
    def _group_call(index, layers):
        def call(hidden, *args, **kwargs):
            name = next(key for key, value in kwargs.items() if isinstance(value, _SlotCache))
            cache = kwargs.pop(name)
            if index % GROUP:
                return hidden
            group = slice(index, index + GROUP)
            return compiled_group(layers[group], name, cache.layers[group], hidden, *args, **kwargs)
        return call


class CompiledPassRunner:
    def __init__(self, static, layers):
        self.static, self.layers = static, layers
        with layers.active():
            static.forward()

    def run(self):
        with self.layers.active():
            return self.static.forward()

torch._dynamo.config.recompile_limit = 64
variants = sys.argv[1:] or ["layers", "whole"]
model, _ = open_model(DEFAULT_MODEL, "cpu", torch.float32)
eager = TargetModel(model, "e"); eager.backend.weight_first = True
prompt = [1000 + i for i in range(256)]
ce = eager.new_cache(); eager.score(ce, prompt, chain([]))
SIZES = (1, 2, 4, 8)
systems = {"eager": (eager, ce)}
layers = CompiledLayers(model)
groups = CompiledGroups(model)


def whole_forward(static: StaticPass) -> torch.Tensor:
    return static.forward()


whole = torch.compile(whole_forward)


class SkipGuardsRunner(CompiledPassRunner):
    def run(self) -> torch.Tensor:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return super().run()


class WholeRunner:
    def __init__(self, static: StaticPass) -> None:
        self.static = static
        whole(static)

    def run(self) -> torch.Tensor:
        return whole(self.static)


for variant in variants:
    def make(static: StaticPass, variant: str = variant):
        with eager.backend.kernels(), torch.inference_mode():
            if variant == "layers-skip-guards":
                return SkipGuardsRunner(static, layers)
            if variant == "groups":
                return CompiledPassRunner(static, groups)
            return CompiledPassRunner(static, layers) if variant == "layers" else WholeRunner(static)
    c0, t0 = compiles(), time.perf_counter()
    passes = SlotPasses(model, layer_windows(model.config), 2, 4096, SIZES, make, min_keys=512)
    passes.prepare()
    print(f"{variant}: {len(passes.runners)} passes, {compiles() - c0} compiles, {time.perf_counter() - t0:.1f} s", flush=True)
    target = TargetModel(model, variant); target.backend.weight_first = True
    target.backend.lone_pass = passes.runner
    cache = passes.new_cache(); target.score(cache, prompt, chain([]))
    systems[variant] = (target, cache)
times: dict = {}
before = compiles()
for turn in range(10):
    for n in SIZES:
        for name, (target, cache) in systems.items():
            start = time.perf_counter(); target.score(cache, [5], chain(list(range(6, 5 + n)))); end = time.perf_counter()
            cache.truncate(256)
            times.setdefault((n, name), []).append(end - start)
for (n, name), seconds in sorted(times.items()):
    print(f"{n} tokens, {name}: min {1000 * min(seconds):.1f} median {1000 * statistics.median(seconds):.1f} ms")
reference = eager.score(ce, [5], chain([6, 7, 8])); ce.truncate(256)
for name, (target, cache) in systems.items():
    out = target.score(cache, [5], chain([6, 7, 8])); cache.truncate(256)
    print(name, "max logit diff", (out - reference).abs().max().item(), "argmax same", bool((out.argmax(-1) == reference.argmax(-1)).all()))
print("compiles while timing", compiles() - before)

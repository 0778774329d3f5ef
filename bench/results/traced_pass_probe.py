"""Probe (2026-11-27): a static pass's decoder layers replayed from TorchScript traces, against the
same static pass run eagerly and against a trace of the whole model; docs/design/cpu-engine.md.

`torch.jit.trace` records the aten ops a forward dispatches and replays them without Python. One
trace serves every group of `group` consecutive layers of a kind at a shape: the layers'
parameters, their slot layers and every tensor argument are the trace's inputs (so tracing costs
one group's forward, a fraction of a second, and slots share traces); each group checks the
trace on a random input before using it. `whole` traces the model's forward with its weights as
constants (3.5-8 s a shape). Times: the static pass's forward alone after `load`, 256 cached
tokens, turns alternated.

    flock -x /tmp/specdec-cpu.lock python bench/results/traced_pass_probe.py 1 20
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from verifier_svc.backends.compiled_layers import cache_argument, decoder_layers, group_step, layer_groups
from verifier_svc.layer_masks import layer_windows
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.static_pass import SlotPasses, _SlotLayer
from verifier_svc.token_tree import chain, tree_attention_mask, tree_position_ids

log = logging.getLogger(__name__)

# Modules whose forward loops over the experts its tokens chose (a mixture of experts): a trace
# would unroll the loop for the recorded input's choice alone, so their layers are not traced.
ROUTING_MODULES = ("Experts", "SparseMoeBlock", "MoeBlock", "MoE")


def _state(layers: list[torch.nn.Module]) -> list[tuple[torch.nn.Module, str, bool]]:
    """(owning module, attribute name, is a parameter) of every parameter and buffer of the layers, in order."""
    state = []
    for layer in layers:
        for module in layer.modules():
            state += [(module, name, True) for name, p in module._parameters.items() if p is not None]
            state += [(module, name, False) for name, b in module._buffers.items() if b is not None]
    return state


def _signature(layers: list[torch.nn.Module]) -> tuple:
    """What two groups must share for one trace to serve both: classes, state names and shapes."""
    return tuple((type(m).__name__, name, tuple(getattr(m, name).shape)) for m, name, _ in _state(layers))


@contextlib.contextmanager
def _swapped(state: list[tuple[torch.nn.Module, str, bool]], tensors: tuple[torch.Tensor, ...]) -> Iterator[None]:
    """The modules' parameters and buffers replaced by `tensors` (in _state's order) for a while."""
    saved = [(m._parameters if param else m._buffers)[name] for m, name, param in state]
    for (module, name, param), tensor in zip(state, tensors):
        (module._parameters if param else module._buffers)[name] = tensor
    try:
        yield
    finally:
        for (module, name, param), tensor in zip(state, saved):
            (module._parameters if param else module._buffers)[name] = tensor


def _leaf_key(leaf: Any) -> Any:
    """What a trace bakes of one argument: a tensor's layout, or the value itself."""
    if isinstance(leaf, torch.Tensor):
        return ("tensor", tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.device)
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return leaf
    return ("object", id(leaf))


class TracedLayers:
    """The decoder layers of one model run as traces, `group` consecutive layers a call, within
    `active()` and only where a call carries a static pass's slot cache (every other pass runs
    the layers as written). `layout()` names the linear layers' current layout (part of a trace's key)."""

    def __init__(self, model: torch.nn.Module, group: int, layout: Callable[[], object]) -> None:
        self.layers = decoder_layers(model)
        self.groups = layer_groups(model.config, len(self.layers), group)
        kinds = getattr(model.config.get_text_config(), "layer_types", None) or [None] * len(self.layers)
        self.layout = layout
        self.traces: dict[tuple, torch.jit.ScriptFunction | None] = {}  # None: refused (_trace)
        self.checked: set[tuple] = set()  # (key, group's first layer): the trace reproduced the group
        self.eager: set[tuple] = set()  # (key, group's first layer): it did not; run eagerly
        self.calls = [self._call(run, index, kinds[run.start]) for run in self.groups for index in run]

    def _call(self, run: range, index: int, kind: str | None) -> Callable[..., Any]:
        layers = [self.layers[i] for i in run]
        layer = self.layers[index]
        state = _state(layers)
        signature = (kind, _signature(layers))

        def call(hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            where = cache_argument(args, kwargs)
            if where is None:
                return layer.forward(hidden, *args, **kwargs)
            if index != run.start:  # the group's first layer ran this one
                return hidden
            if isinstance(where, str):
                kwargs = dict(kwargs)
                cache = kwargs.pop(where)
            else:
                cache, args = args[where], (*args[:where], None, *args[where + 1 :])
            group = _Group(run.start, layers, state, where, [cache.layers[i] for i in run])
            return self._run(signature, group, hidden, args, kwargs)

        return call

    def _run(self, signature: tuple, group: _Group, hidden: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
        leaves, spec = pytree.tree_flatten((args, kwargs))
        tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        slots = [t for slot in group.slot_layers for t in (slot.keys, slot.values)]
        inputs = (hidden, group.slot_layers[0].write_at, *slots, *(leaves[i] for i in tensor_at),
                  *(getattr(m, name).detach() for m, name, _ in group.state))
        key = (signature, spec, self.layout(), *(_leaf_key(x) for x in (hidden, *slots, *leaves)))

        def eager(hidden: torch.Tensor) -> torch.Tensor:
            return group_step(group.layers, group.where, group.slot_layers, hidden, *args, **kwargs)

        if (key, group.first) in self.eager:
            return eager(hidden)
        if key not in self.traces:
            self.traces[key] = _trace(group, leaves, spec, tensor_at, inputs)
        trace = self.traces[key]
        if trace is None:
            self.eager.add((key, group.first))
            return eager(hidden)
        if (key, group.first) not in self.checked:
            # Each group, before its first use of a trace, runs another input both ways: a trace
            # that baked a branch on values (a mixture of experts' routing) or on an attribute
            # that differs between layers (a layer index) gives other outputs, and is not used.
            scale = hidden.float().square().mean().sqrt()
            probe = torch.randn(hidden.shape, generator=torch.Generator().manual_seed(0), dtype=hidden.dtype) * scale
            if not torch.equal(trace(probe, *inputs[1:]), eager(probe)):
                log.warning("%s layers from %d run eagerly at this shape: the trace does not reproduce them", type(group.layers[0]).__name__, group.first)
                self.eager.add((key, group.first))
                return eager(hidden)
            self.checked.add((key, group.first))
        return trace(*inputs)

    @property
    def count(self) -> int:
        """Traces recorded so far (refused ones not counted)."""
        return sum(trace is not None for trace in self.traces.values())

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within it, every layer's call (nn.Module.__call__ reads _compiled_call_impl) goes through the traces."""
        for layer, call in zip(self.layers, self.calls):
            layer._compiled_call_impl = call
        try:
            yield
        finally:
            for layer in self.layers:
                layer._compiled_call_impl = None


class _Group:
    """One call's group of layers: its first layer's index, the layers, their state (_state), where
    the cache argument goes and each layer's slot layer."""

    def __init__(self, first: int, layers: list[torch.nn.Module], state: list, where: str | int, slot_layers: list[_SlotLayer]) -> None:
        self.first, self.layers, self.state, self.where, self.slot_layers = first, layers, state, where, slot_layers


def _trace(group: _Group, leaves: list, spec: pytree.TreeSpec, tensor_at: list[int], inputs: tuple) -> torch.jit.ScriptFunction | None:
    """A trace of the group's forwards over `inputs` (in TracedLayers._run's order): its
    parameters, buffers, slot layers and tensor arguments are all inputs. None where a layer
    routes its tokens to experts (ROUTING_MODULES)."""
    count, arguments = len(group.layers), len(tensor_at)

    def step(hidden: torch.Tensor, write_at: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        slots, tensors, weights = rest[: 2 * count], rest[2 * count : 2 * count + arguments], rest[2 * count + arguments :]
        values = list(leaves)
        for i, tensor in zip(tensor_at, tensors):
            values[i] = tensor
        args, kwargs = pytree.tree_unflatten(values, spec)
        slot_layers = [_SlotLayer(slots[2 * j], slots[2 * j + 1], write_at) for j in range(count)]
        with _swapped(group.state, weights):
            return group_step(group.layers, group.where, slot_layers, hidden, *args, **kwargs)

    if any(type(m).__name__.endswith(ROUTING_MODULES) for layer in group.layers for m in layer.modules()):
        return None
    # Warnings: its deprecation, and TracerWarnings wherever code branches on a shape (which is
    # a tensor while traced), which the trace's key fixes; a branch on a value is the probe's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(step, inputs, check_trace=False)



def main() -> None:
    size, turns = int(sys.argv[1]), int(sys.argv[2])
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    target, _ = load_target(VerifierSettings(model="default", tune_pass_sizes=False))
    model = target.model
    passes = SlotPasses(model, layer_windows(model.config), 1, 4096, [size], min_keys=512)
    cache = passes.new_cache()
    target.score(cache, [1000 + i for i in range(256)], chain([]))
    static = passes.runner(cache, 256, size).static
    ids = [5000 + j for j in range(size)]
    tree = chain(ids[1:])
    mask, positions = tree_attention_mask(tree, 256, 1), tree_position_ids(tree, 256, 1)
    layers = {g: TracedLayers(model, g, lambda: True) for g in (5, 30)}

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, positions: torch.Tensor, write_at: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, position_ids=positions, attention_mask=mask, cache=static.cache,
                              use_cache=True, logits_to_keep=static.tokens).logits

    with torch.inference_mode(), target.kernels():
        static.load(ids, positions, mask, 256)
        reference = static.forward().clone()
        began = time.perf_counter()
        whole = torch.jit.trace(Whole(), (static.ids, static.positions, static.write_at, static.masks[""]), check_trace=False)
        print(f"whole-model trace: {time.perf_counter() - began:.1f} s")
        for group, traced in layers.items():
            began = time.perf_counter()
            with traced.active():
                out = static.forward()
            print(f"layers traced {group} a call: first pass {time.perf_counter() - began:.2f} s, {traced.count} traces; "
                  f"logits equal to eager: {torch.equal(out, reference)}")
        print("whole trace logits equal to eager:", torch.equal(whole(static.ids, static.positions, static.write_at, static.masks[""]), reference))

    def run_layers(group: int) -> Callable[[], object]:
        def run() -> object:
            with layers[group].active():
                return static.forward()
        return run

    systems: dict[str, Callable[[], object]] = {
        "eager": static.forward, "layers, 5 a call": run_layers(5), "layers, 30 a call": run_layers(30),
        "whole model": lambda: whole(static.ids, static.positions, static.write_at, static.masks[""]),
    }
    times: dict[str, list[float]] = {name: [] for name in systems}
    with torch.inference_mode(), target.kernels():
        for run in systems.values():
            run(), run()
        for _ in range(turns):
            for name, run in systems.items():
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
    base = statistics.median(times["eager"])
    for name, seconds in times.items():
        print(f"{size}-token static pass, {name:18s} median {1000 * statistics.median(seconds):6.1f} min {1000 * min(seconds):6.1f} ms, "
              f"eager / this {base / statistics.median(seconds):.2f}")


if __name__ == "__main__":
    main()

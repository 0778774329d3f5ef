"""The model's decoder layers compiled by inductor, for static passes: the fewest kernels a pass.

A recorded pass (cuda_graphs.py) is bound by its kernel count. Compiled norms and MLPs
(compiled_blocks.py) fuse those blocks; a whole decoder layer compiled also fuses the rotary
embedding, the residual additions and the attention's reshapes, leaving little beyond the
matrix products and the attention kernel. Dynamo's per-call guard checks, which make compiled
layers barely faster than eager ones when run from Python (docs/design/cpu-engine.md), cost
nothing in a replay: a graph replays kernels only.

One compiled function serves every layer: `group_step(layers, cache_at, cache_layers,
hidden, ...)` runs a group of consecutive layers (one layer a group by default), each handed its
own slot layer (static_pass._SlotLayer, whose update ignores the layer index) as its cache, with
dynamic shapes, so no layer index and no pass shape is baked into the code: a model compiles a
few times (one row, then any), each in seconds, at the first pass run under `active()`. Run from
Python (the CPU: cpu_compiled.py) each compiled call pays dynamo's guard checks, ~180 us, so
there layers go in groups: the call of a group's first layer runs the whole group and the
others hand their input on. A group's layers share one attention kind (config.layer_types), as
the model hands every layer of a kind the same mask and arguments. The stateless blocks outside
the layers (the final norm) are compiled as compiled_blocks.py does.

Decoder layers are found as the model's ModuleList of `num_hidden_layers` modules; a layer is
run compiled only where the pass hands it a static pass's slot cache (any other call runs it as
written). Like compiled blocks, compiled layers run only under `active()`: every other pass
(prefills, batched passes, the tests' references) runs the model as transformers wrote it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import PretrainedConfig

from verifier_svc.backends.compiled_blocks import CompiledBlocks, calls_installed
from verifier_svc.static_pass import _SlotCache, _SlotLayer


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: its first ModuleList of config.num_hidden_layers modules
    ([] where it has none)."""
    count = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return list(module)
    return []


def layer_groups(config: PretrainedConfig, count: int, size: int) -> list[range]:
    """Consecutive layers in groups of at most `size`, each of one attention kind."""
    kinds = getattr(config.get_text_config(), "layer_types", None) or [None] * count
    groups: list[range] = []
    start = 0
    for index in range(1, count + 1):
        if index == count or index - start == size or kinds[index] != kinds[start]:
            groups.append(range(start, index))
            start = index
    return groups


def group_step(layers: list[torch.nn.Module], cache_at: str | int, cache_layers: list[_SlotLayer], hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The layers' forwards in turn, each with its own slot layer as the cache argument
    `cache_at` (a keyword, or an index into args: GPT-2 passes its cache by position); what is compiled."""
    for layer, cache_layer in zip(layers, cache_layers):
        if isinstance(cache_at, int):
            args = (*args[:cache_at], cache_layer, *args[cache_at + 1 :])
        else:
            kwargs[cache_at] = cache_layer
        hidden = layer.forward(hidden, *args, **kwargs)
    return hidden


def cache_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | int | None:
    """Where a layer's call carries a static pass's slot cache: its keyword, its index in args,
    or None (not a static pass)."""
    name = next((key for key, value in kwargs.items() if isinstance(value, _SlotCache)), None)
    if name is not None:
        return name
    return next((i for i, value in enumerate(args) if isinstance(value, _SlotCache)), None)


_compiled_step: Callable[..., torch.Tensor] | None = None


def compiled_step() -> Callable[..., torch.Tensor]:
    """group_step compiled by inductor with dynamic shapes (lazily, at the first call)."""
    global _compiled_step
    if _compiled_step is None:
        _compiled_step = torch.compile(group_step, dynamic=True)
    return _compiled_step


class CompiledLayers:
    """The decoder layers of one model with compiled calls, `group` consecutive layers a call
    (layer_groups), and its stateless blocks outside them compiled, both switched on by `active()`."""

    def __init__(self, model: torch.nn.Module, group: int = 1, step: Callable[..., torch.Tensor] | None = None) -> None:
        """`step`: group_step compiled (default: compiled_step(), dynamo's at the first call)."""
        self.step = step
        self.layers = decoder_layers(model)
        self.rest = CompiledBlocks(model, outside=self.layers)
        self.groups = layer_groups(model.config, len(self.layers), group)
        self.calls = [self._call(run, index) for run in self.groups for index in run]

    @property
    def count(self) -> int:
        """Modules run compiled: the layers and the blocks outside them."""
        return len(self.layers) + len(self.rest.blocks)

    def _call(self, run: range, index: int) -> Callable[..., Any]:
        layers = [self.layers[i] for i in run]
        layer = self.layers[index]

        def call(hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            where = cache_argument(args, kwargs)
            if where is None:  # not a static pass: the layer as written
                return layer.forward(hidden, *args, **kwargs)
            if index != run.start:  # the group's first layer ran this one
                return hidden
            cache = kwargs.pop(where) if isinstance(where, str) else args[where]
            return (self.step or compiled_step())(layers, where, [cache.layers[i] for i in run], hidden, *args, **kwargs)

        return call

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within it, every layer's call and every block outside the layers runs compiled."""
        with calls_installed(self.layers, self.calls), self.rest.active():
            yield

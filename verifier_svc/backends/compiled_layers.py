"""The model's decoder layers compiled by inductor, for recorded passes: the fewest kernels a pass.

A recorded pass (cuda_graphs.py) is bound by its kernel count. Compiled norms and MLPs
(compiled_blocks.py) fuse those blocks; a whole decoder layer compiled also fuses the rotary
embedding, the residual additions and the attention's reshapes, leaving little beyond the
matrix products and the attention kernel. Dynamo's per-call guard checks, which make compiled
layers barely faster than eager ones when run from Python (docs/design/cpu-engine.md), cost
nothing in a replay: a graph replays kernels only.

One compiled function serves every layer: `layer_step(layer, cache_argument, cache_layer, ...)`,
with dynamic shapes, where `cache_layer` is the layer's own slot layer (static_pass._SlotLayer,
whose update ignores the layer index), so no layer index and no pass shape is baked into the
code: a model compiles a few times (one row, then any; once more per attention kind, e.g. Gemma
2's sliding and full layers), each in seconds, at the first pass run under `active()`. The
stateless blocks outside the layers (the final norm) are compiled as compiled_blocks.py does.

Decoder layers are found as the model's ModuleList of `num_hidden_layers` modules; a layer is
run compiled only where the pass hands it a static pass's slot cache (any other call runs it as
written). Like compiled blocks, compiled layers run only under `active()`: every pass not being
recorded runs the model as transformers wrote it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from verifier_svc.backends.compiled_blocks import CompiledBlocks
from verifier_svc.static_pass import _SlotCache, _SlotLayer


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: its first ModuleList of config.num_hidden_layers modules
    ([] where it has none)."""
    count = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return list(module)
    return []


def layer_step(layer: torch.nn.Module, cache_argument: str, cache_layer: _SlotLayer, *args: Any, **kwargs: Any) -> Any:
    """`layer`'s forward with its slot layer as the cache (what is compiled)."""
    kwargs[cache_argument] = cache_layer
    return layer.forward(*args, **kwargs)


_compiled_step: Callable[..., Any] | None = None


def compiled_step() -> Callable[..., Any]:
    """layer_step compiled by inductor with dynamic shapes (lazily, at the first call)."""
    global _compiled_step
    if _compiled_step is None:
        _compiled_step = torch.compile(layer_step, dynamic=True)
    return _compiled_step


class CompiledLayers:
    """The decoder layers of one model with compiled calls, and its stateless blocks outside
    them compiled, both switched on by `active()`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.layers = decoder_layers(model)
        self.rest = CompiledBlocks(model, outside=self.layers)
        self.calls = [self._call(index, layer) for index, layer in enumerate(self.layers)]

    @property
    def count(self) -> int:
        """Modules run compiled: the layers and the blocks outside them."""
        return len(self.layers) + len(self.rest.blocks)

    @staticmethod
    def _call(index: int, layer: torch.nn.Module) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            name = next((key for key, value in kwargs.items() if isinstance(value, _SlotCache)), None)
            if name is None:  # not a static pass: the layer as written
                return layer.forward(*args, **kwargs)
            return compiled_step()(layer, name, kwargs.pop(name).layers[index], *args, **kwargs)

        return call

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Within it, every layer's call (nn.Module.__call__ reads _compiled_call_impl) and every
        block outside the layers runs compiled."""
        for layer, call in zip(self.layers, self.calls):
            layer._compiled_call_impl = call
        try:
            with self.rest.active():
                yield
        finally:
            for layer in self.layers:
                layer._compiled_call_impl = None

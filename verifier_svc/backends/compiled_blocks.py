"""The model's stateless repeated blocks compiled by inductor, for recorded passes: fewer kernels
(`--cuda-compiled blocks`; compiled layers, the default, compile the blocks outside the layers).

A recorded pass (cuda_graphs.py) is bound by its kernel count, not by the device: SmolLM2-135M
runs ~40 kernels a layer in eager mode, of which an RMS norm alone is seven (cast, square, mean,
add, rsqrt, multiply, multiply by the weight) and the gated MLP five. Compiling these blocks
fuses each norm into one kernel and the MLP's activation into one, without touching attention or
the cache (the blocks see neither, so no pass's shape or cache is baked into the compiled code).

Blocks are found by class name (`*RMSNorm`, `*MLP`: the decoder's norms and feed-forward in
every architecture transformers names so). Each is compiled with dynamic shapes; every instance
of one class shares one compiled artifact (torch.compile takes a module's parameters as inputs),
so a model compiles a handful of times (row count 1, then any), each a few seconds, at the first
pass run under `active()`.

The compiled blocks run only under `active()`: the backend records graphs under it, and every
other pass (prefills, batched passes, the tests' references) runs the model as transformers
wrote it. Numerics: inductor computes a norm in float32 as the eager code does, but may sum the
mean in another order; logits move within the dtype's rounding (tests/verifier_svc/test_cuda.py
bounds graph replays against eager passes, and greedy output against generate()).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

# Class-name endings of the blocks compiled: stateless functions of one hidden-state tensor.
BLOCK_SUFFIXES = ("RMSNorm", "MLP")


def stateless_blocks(model: torch.nn.Module, outside: Sequence[torch.nn.Module] = ()) -> list[torch.nn.Module]:
    """The modules of `model` whose class name ends in one of BLOCK_SUFFIXES, outermost only,
    and none within the modules `outside`."""
    blocks: list[torch.nn.Module] = []
    inside: set[int] = {id(m) for module in outside for m in module.modules()}
    for module in model.modules():
        if id(module) in inside:
            continue
        if type(module).__name__.endswith(BLOCK_SUFFIXES):
            blocks.append(module)
            inside.update(id(m) for m in module.modules())
    return blocks


@contextlib.contextmanager
def calls_installed(modules: Sequence[torch.nn.Module], calls: Sequence[Callable[..., Any]]) -> Iterator[None]:
    """Within it, each module's call runs its call in `calls` instead of its forward
    (nn.Module.__call__ reads _compiled_call_impl, which nn.Module.compile sets)."""
    for module, call in zip(modules, calls):
        module._compiled_call_impl = call
    try:
        yield
    finally:
        for module in modules:
            module._compiled_call_impl = None


class CompiledBlocks:
    """The stateless blocks of one model (none within `outside`) with their compiled calls,
    switched on by `active()`."""

    def __init__(self, model: torch.nn.Module, outside: Sequence[torch.nn.Module] = ()) -> None:
        self.blocks = stateless_blocks(model, outside)
        # What nn.Module.compile installs, kept aside until active(): the module's own call,
        # compiled (torch.compile compiles lazily, at the first call).
        self.compiled: list[Callable[..., Any]] = [torch.compile(b._call_impl, dynamic=True) for b in self.blocks]

    def active(self) -> contextlib.AbstractContextManager:
        """Within it, every block's call runs compiled."""
        return calls_installed(self.blocks, self.compiled)

    @property
    def count(self) -> int:
        """Modules run compiled."""
        return len(self.blocks)

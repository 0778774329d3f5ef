"""Lone passes on CPU as static passes with their decoder layers compiled, five layers a call:
the Python between kernels removed where it costs.

An eager one-token pass of SmolLM2-135M on the 2-core CPU dispatches ~8,600 ops, and about half
of its time is outside its matrix products. A static pass (static_pass.py: fixed shapes over a
session's cache slot) run with its decoder layers compiled by inductor in groups of
COMPILED_GROUP (compiled_layers.py) keeps nearly all the gain of compiling the whole pass (a
one-token pass 49.6 against 48.8 ms, eager 58.3, on a slow day) at a fraction of its start (6
compiles in 20 s from inductor's cache and 242 s cold, against 122 s and 582 s):
docs/design/cpu-engine.md. Each compiled call pays dynamo's guard checks (~180 us), so one layer a
call would keep only 1.09-1.17x. Two conditions hold while compiling: no freezing (freezing turns
every fp32 linear into MKL's packed product, the slow matrix-vector path for one row), and the
linear layers weight first (the pass runs under the backend's kernels(), so dynamo traces
SwitchableLinear's weight-first branch).

One compiled function serves every group of every runner (slots, sizes, key lengths); a shape
that changes is made dynamic, so a few compiles cover every shape. `compiles()` counts them
(dynamo's own counter of frames compiled) and `RECOMPILE_LIMIT` is raised to what every shape
could need, so a shape past dynamo's default limit does not fall back to eager passes without a
word.
"""

from __future__ import annotations

import torch
import torch._dynamo

from verifier_svc.backends.compiled_layers import CompiledLayers
from verifier_svc.static_pass import StaticPass

# Decoder layers a compiled call runs (docs/design/cpu-engine.md: five, measured).
COMPILED_GROUP = 5
# Dynamo recompiles a function at most this many times before running it eagerly for good;
# generous: sizes x key lengths x group kinds, were none of them to share a compile.
RECOMPILE_LIMIT = 64


def compiled_layers(model: torch.nn.Module) -> CompiledLayers:
    """The model's layers compiled COMPILED_GROUP a call, with dynamo's recompile limit raised."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return CompiledLayers(model, group=COMPILED_GROUP)


def compiles() -> int:
    """Frames dynamo has compiled in this process (each shape that needed a compile)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


class CompiledPassRunner:
    """A StaticPass run with its layers compiled; compiled for its shape when made (the inputs
    still as StaticPass made them: no session's entries are written)."""

    made = 0  # runners made by this process
    runs = 0  # lone passes run by them

    def __init__(self, static: StaticPass, layers: CompiledLayers) -> None:
        self.static, self.layers = static, layers
        with layers.active():
            static.forward()
        CompiledPassRunner.made += 1

    def run(self) -> torch.Tensor:
        CompiledPassRunner.runs += 1
        with self.layers.active():
            return self.static.forward()

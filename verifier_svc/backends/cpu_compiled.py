"""Lone passes on CPU as inductor-compiled static passes: the Python between kernels removed.

An eager one-token pass of SmolLM2-135M on the 2-core CPU dispatches ~8,600 ops, and about half
of its time is outside its matrix products. The static pass (static_pass.py: fixed shapes over a
session's cache slot) compiled by inductor runs one-token passes 1.36-1.45x faster and 4-token
ones 1.24-1.28x (docs/design/cpu-engine.md), on two conditions: no freezing (freezing turns
every fp32 linear into MKL's packed product, the slow matrix-vector path for one row), and the
linear layers weight first while it is traced (the pass runs under the backend's kernels(), so
dynamo traces SwitchableLinear's weight-first branch).

One compiled function serves every runner: StaticPass.forward compiled once and called with the
static pass as its argument, so all slots, sizes and key lengths share one dynamo cache; a shape
that changes makes dynamo recompile once with it dynamic (automatic dynamic shapes), so a few
compiles cover every shape. `compiles()` counts them (dynamo's own counter of frames compiled)
and `RECOMPILE_LIMIT` is raised to what every shape could need, so a shape past dynamo's default
limit does not fall back to eager passes without a word.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._dynamo

from verifier_svc.static_pass import StaticPass

# Dynamo recompiles a function at most this many times before running it eagerly for good;
# generous: sizes x key lengths, were none of them to share a compile.
RECOMPILE_LIMIT = 64

_compiled: Callable[[StaticPass], torch.Tensor] | None = None


def compiled_forward() -> Callable[[StaticPass], torch.Tensor]:
    """StaticPass.forward compiled by inductor (lazily, at the first call of each new shape)."""
    global _compiled
    if _compiled is None:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        _compiled = torch.compile(StaticPass.forward)
    return _compiled


def compiles() -> int:
    """Frames dynamo has compiled in this process (each shape that needed a compile)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


class CompiledPassRunner:
    """A StaticPass run through the compiled forward; compiled for its shape when made (the
    inputs still as StaticPass made them: no session's entries are written)."""

    made = 0  # runners made by this process
    runs = 0  # lone passes run by them

    def __init__(self, static: StaticPass) -> None:
        self.static = static
        compiled_forward()(static)
        CompiledPassRunner.made += 1

    def run(self) -> torch.Tensor:
        CompiledPassRunner.runs += 1
        return compiled_forward()(self.static)

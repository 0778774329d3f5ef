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
SwitchableLinear's weight-first branch). Where one-row copies exist (linear_layout.py), the
eager one-token pass reads them faster than a compiled one (inductor lowers their one-row bmm to
a slow multiply and sum), so compiled passes serve 2-8 tokens there (docs/design/cpu-engine.md).

One compiled function serves every group of every runner (slots, sizes, key lengths), with
dynamic shapes, so a few compiles cover every shape. They are compiled ahead of their first call
and kept on disk (stored_steps.py): a later start with the same model, code and versions loads
them in about a second instead of compiling for minutes. `compiles()` counts what this process
compiled.
"""

from __future__ import annotations

from pathlib import Path

import torch

from verifier_svc.backends.compiled_layers import CompiledLayers
from verifier_svc.backends.stored_steps import StoredSteps, store_key
from verifier_svc.static_pass import StaticPass

# Decoder layers a compiled call runs (docs/design/cpu-engine.md: five, measured).
COMPILED_GROUP = 5


def compiled_layers(model: torch.nn.Module, store: Path | None) -> CompiledLayers:
    """The model's layers compiled COMPILED_GROUP a call, their compiles kept under `store`
    (None: in this process only), in a folder of this model, code, versions and thread count
    (inductor's C++ kernels are written for it)."""
    extra = {"group": COMPILED_GROUP, "threads": torch.get_num_threads()}
    folder = None if store is None else store / store_key(model, extra)
    return CompiledLayers(model, group=COMPILED_GROUP, step=StoredSteps(folder))


def compiles() -> int:
    """Layer groups this process has compiled (each class of shapes no stored compile took)."""
    return StoredSteps.made


class CompiledPassRunner:
    """A StaticPass run with its layers compiled; compiled for its shape when made (the inputs
    still as StaticPass made them: no session's entries are written)."""

    made = 0  # runners made by this process
    runs = 0  # lone passes run by them

    def __init__(self, static: StaticPass, layers: CompiledLayers) -> None:
        self.static, self.layers = static, layers
        self._forward()
        CompiledPassRunner.made += 1

    def run(self) -> torch.Tensor:
        CompiledPassRunner.runs += 1
        return self._forward()

    def _forward(self) -> torch.Tensor:
        """The pass outside inference mode, without gradients: its tensors normal ones whatever
        the caller's mode, as when compiled (a stored compile's guards, read back, take an
        inference tensor for another kind of tensor)."""
        with torch.inference_mode(False), torch.no_grad(), self.layers.active():
            return self.static.forward()

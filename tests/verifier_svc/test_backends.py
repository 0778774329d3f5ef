"""The device boundary (verifier_svc/backends/): one backend per device kind, chosen at load;
the general path never asks which device it runs on; CPU pass-size tuning survives a noisy
neighbour (backends/cpu_tuning.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from verifier_svc.attention import GROUPED_SDPA
from verifier_svc.backends import attention_for, backend_class, backend_for
from verifier_svc.backends import cpu_tuning
from verifier_svc.backends.cpu import CpuBackend
from verifier_svc.backends.cuda import CudaBackend
from verifier_svc.backends.generic import GenericBackend

ROOT = Path(__file__).resolve().parents[2]
# The general path: sessions, trees, acceptance, scheduling, the passes themselves.
GENERAL = (
    "target_model.py", "batched_pass.py", "session.py", "scheduler.py", "acceptance.py", "token_tree.py",
    "kv_cache.py", "layer_masks.py", "session_attention.py", "round_input.py", "servicer.py", "server.py", "sampling.py",
)


def test_one_backend_per_device_kind() -> None:
    assert backend_class("cpu") is CpuBackend and backend_class(torch.device("cuda", 0)) is CudaBackend
    assert backend_class("mps") is GenericBackend
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    backend = backend_for(model)
    assert isinstance(backend, CpuBackend) and backend.weight_first and backend.min_pass_tokens == 1
    backend.weight_first = False
    assert backend.min_pass_tokens == 4  # F.linear is slow on 2-3 rows


def test_attention_is_the_backends_choice() -> None:
    config = LlamaConfig()
    assert attention_for(config, "cpu") == GROUPED_SDPA
    assert attention_for(config, "cuda") == "sdpa"
    assert attention_for(config, "mps") == "sdpa"


@pytest.mark.parametrize("name", GENERAL)
def test_the_general_path_never_asks_the_device_kind(name: str) -> None:
    source = (ROOT / "verifier_svc" / name).read_text()
    assert not re.search(r"device\.type|==\s*[\"'](cpu|cuda)[\"']", source), name


class _Cache:
    def truncate(self, length: int) -> None:
        pass


class _ScriptedTarget:
    """A target whose passes advance a fake clock by cost(call, size, weight_first)."""

    def __init__(self, layout: CpuBackend, cost, clock: list[float]) -> None:  # type: ignore[no-untyped-def]
        self.layout, self.cost, self.clock, self.calls = layout, cost, clock, 0
        self.pass_tokens: list[int] = [1]
        self.pass_seconds: list[float] = []
        self.pass_context_tokens = 0

    def new_cache(self) -> _Cache:
        return _Cache()

    def score(self, cache: _Cache, pending: list[int], tree) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        self.clock[0] += self.cost(self.calls, len(pending) + len(tree), self.layout.weight_first)


def _tune(cost, budget: float = 60.0, monkeypatch=None):  # type: ignore[no-untyped-def]
    clock = [0.0]
    monkeypatch.setattr(cpu_tuning.time, "perf_counter", lambda: clock[0])
    layout = CpuBackend(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    target = _ScriptedTarget(layout, cost, clock)
    seconds = cpu_tuning.tune_pass_sizes(target, layout, context_tokens=8, max_tokens=12, repeats=3, budget_seconds=budget)  # type: ignore[arg-type]
    return target, layout, seconds


def test_a_burst_during_the_sweeps_does_not_lock_in_padding(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every sweep timed 2-11 tokens at ~3 s (a neighbour loading both cores while they ran) and
    12 at its real 0.1 s: the confirming pairs, run back to back, show 12 slower than each size's
    own unpadded pass, so nothing is padded."""
    sweep_calls = 1 + 3 * 12 * 2  # the prefill, then 3 sweeps of 12 sizes in both layouts

    def cost(call: int, size: int, weight_first: bool) -> float:
        if call <= sweep_calls and 2 <= size <= 11:
            return 3.0
        return 0.04 + 0.005 * size

    target, _, seconds = _tune(cost, budget=1e9, monkeypatch=monkeypatch)
    assert target.pass_tokens == list(range(1, 13))
    assert target.pass_seconds == [seconds[r - 1] for r in range(1, 13)] and max(target.pass_seconds) < 0.2


def test_a_real_gain_is_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """2 and 3 tokens through F.linear truly slower than 4 (the MKL shape quirk): padded to 4."""

    def cost(call: int, size: int, weight_first: bool) -> float:
        base = 0.04 + 0.005 * size
        return base + (0.05 if size in (2, 3) else 0.0) + (0.0 if weight_first else 0.001)

    target, layout, _ = _tune(cost, monkeypatch=monkeypatch)
    assert target.pass_tokens[:4] == [1, 4, 4, 4] and layout.weight_first


def test_tuning_stops_at_its_budget_and_then_pads_nothing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    target, layout, seconds = _tune(lambda call, size, weight_first: 5.0, budget=30.0, monkeypatch=monkeypatch)
    assert seconds == [] and target.pass_tokens == [1] and target.pass_seconds == [] and layout.weight_first

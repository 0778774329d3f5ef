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
    assert backend.min_pass_tokens == 4  # F.linear is slow on 2-3 rows in float32
    narrow = backend_for(torch.nn.Sequential(torch.nn.Linear(4, 4)).to(torch.bfloat16))
    narrow.weight_first = False
    assert narrow.min_pass_tokens == 1  # bfloat16 products cost in proportion to their rows


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

    def score(self, cache: _Cache, pending: list[int], tree) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        self.clock[0] += self.cost(self.calls, len(pending) + len(tree), self.layout.weight_first)


def _tune(cost, budget: float = 60.0, monkeypatch=None):  # type: ignore[no-untyped-def]
    clock = [0.0]
    monkeypatch.setattr(cpu_tuning.time, "perf_counter", lambda: clock[0])
    layout = CpuBackend(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    target = _ScriptedTarget(layout, cost, clock)
    seconds = cpu_tuning.tune_pass_sizes(target, layout, _Cache(), context_tokens=8, max_tokens=12, repeats=3, budget_seconds=budget)  # type: ignore[arg-type]
    return target, layout, seconds


def test_a_burst_during_the_sweeps_does_not_lock_in_padding(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every sweep timed 2-11 tokens at ~3 s (a neighbour loading both cores while they ran) and
    12 at its real 0.1 s: the confirming pairs, run back to back, show 12 slower than each size's
    own unpadded pass, so nothing is padded."""
    sweep_calls = 3 * 12 * 2  # 3 sweeps of 12 sizes in both layouts

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


def _tune_batched(cost, monkeypatch) -> tuple[bool, int]:  # type: ignore[no-untyped-def]
    """(weight first, rows padded to) as tune_batched_layout decides them on a fake clock."""
    clock = [0.0]
    monkeypatch.setattr(cpu_tuning.time, "perf_counter", lambda: clock[0])
    layout = CpuBackend(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    target = _ScriptedTarget(layout, cost, clock)
    padded = cpu_tuning.tune_batched_layout(target, layout, _Cache(), context_tokens=8, padded_rows=4)  # type: ignore[arg-type]
    assert target.calls == 2 * cpu_tuning.COPY_TURNS * 3  # 2, 4 and 8 rows in both layouts, in turns
    return layout.weight_first, padded


def test_torchs_batched_passes_take_the_layout_that_runs_their_rows_faster(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Beside onnxruntime's lone passes: F.linear where its 2-8-row passes run faster (padding 2
    rows to 4 only where 4 ran faster), weight first where they do not or gain less than MIN_GAIN."""
    intel = {True: {2: 0.074, 4: 0.076, 8: 0.088}, False: {2: 0.037, 4: 0.057, 8: 0.078}}  # measured, 2026-11-28
    assert _tune_batched(lambda call, size, weight_first: intel[weight_first][size], monkeypatch) == (False, 1)
    quirk = {True: {2: 0.074, 4: 0.076, 8: 0.088}, False: {2: 0.070, 4: 0.050, 8: 0.078}}  # 2 rows slow through MKL
    assert _tune_batched(lambda call, size, weight_first: quirk[weight_first][size], monkeypatch) == (False, 4)
    amd = {True: {2: 0.030, 4: 0.041, 8: 0.064}, False: {2: 0.071, 4: 0.079, 8: 0.085}}
    assert _tune_batched(lambda call, size, weight_first: amd[weight_first][size], monkeypatch) == (True, 1)
    level = {True: {2: 0.050, 4: 0.060, 8: 0.080}, False: {2: 0.049, 4: 0.060, 8: 0.079}}
    assert _tune_batched(lambda call, size, weight_first: level[weight_first][size], monkeypatch) == (True, 1)


def test_a_burst_does_not_choose_torchs_batched_layout(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Weight first hit by a neighbour in all but its last turn: minima compare, so F.linear
    (slower in clean passes) is not chosen."""
    def cost(call: int, size: int, weight_first: bool) -> float:
        if weight_first:
            return 0.030 if call > 2 * 3 * (cpu_tuning.COPY_TURNS - 1) else 3.0
        return 0.060

    assert _tune_batched(cost, monkeypatch) == (True, 1)


class _CopiesTarget:
    """A target whose passes of `tokens` tokens take cost(turn, copies on) on a fake clock."""

    def __init__(self, layout: CpuBackend, copies: str, cost, clock: list[float]) -> None:  # type: ignore[no-untyped-def]
        self.layout, self.copies, self.cost, self.clock, self.passes = layout, copies, cost, clock, 0
        self.tokens = 1 if copies == "one_row" else cpu_tuning.FLOAT32_ROWS_TOKENS

    def score(self, cache: _Cache, pending: list[int], tree) -> None:  # type: ignore[no-untyped-def]
        assert len(pending) == 1 and 1 + len(tree) == self.tokens
        self.passes += 1
        self.clock[0] += self.cost(self.passes, getattr(self.layout, self.copies))


@pytest.fixture(params=["one_row", "float32_rows"])
def keep(request, monkeypatch):  # type: ignore[no-untyped-def]
    """keep(cost): whether cpu_tuning.keep_copies keeps the copies (each kind) on a fake clock."""

    def decide(cost) -> bool:  # type: ignore[no-untyped-def]
        clock = [0.0]
        monkeypatch.setattr(cpu_tuning.time, "perf_counter", lambda: clock[0])
        monkeypatch.setattr("verifier_svc.backends.pass_timing.time.perf_counter", lambda: clock[0])
        layout = CpuBackend(torch.nn.Sequential(torch.nn.Linear(2, 2)))
        layout.weight_first = False
        target = _CopiesTarget(layout, request.param, cost, clock)
        kept = cpu_tuning.keep_copies(target, layout, request.param, _Cache(), context_tokens=8)  # type: ignore[arg-type]
        assert layout.weight_first and getattr(layout, request.param) is kept  # timed weight first, left as decided
        assert target.passes == 2 * cpu_tuning.COPY_TURNS
        return kept

    return decide


def test_weight_copies_are_kept_only_where_they_pay(keep) -> None:  # type: ignore[no-untyped-def]
    assert keep(lambda turn, copies: 0.030 if copies else 0.040)
    assert not keep(lambda turn, copies: 0.0395 if copies else 0.040)  # within MIN_GAIN
    assert not keep(lambda turn, copies: 0.050 if copies else 0.040)


def test_a_burst_on_the_other_choice_does_not_keep_weight_copies(keep) -> None:  # type: ignore[no-untyped-def]
    """Every pass without the copies but one hit by a neighbour: minima compare, so the one clean
    pass decides, and the copies (no faster) go."""
    assert not keep(lambda turn, copies: 0.040 if copies or turn == 2 else 3.0)


class _OneDnnTarget:
    """A target whose passes of `size` tokens take cost(call, size, oneDNN copies on) on a fake clock."""

    def __init__(self, layout: CpuBackend, cost, clock: list[float]) -> None:  # type: ignore[no-untyped-def]
        self.layout, self.cost, self.clock, self.calls = layout, cost, clock, 0

    def score(self, cache: _Cache, pending: list[int], tree) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        size = len(pending) + len(tree)
        self.clock[0] += self.cost(self.calls, size, bool(self.layout.onednn_min_rows) and size >= self.layout.onednn_min_rows)


def _onednn_rows(cost, monkeypatch, turns: int = cpu_tuning.COPY_TURNS) -> int:  # type: ignore[no-untyped-def]
    """onednn_rows_from's choice on a fake clock, having timed `turns` turns."""
    clock = [0.0]
    monkeypatch.setattr(cpu_tuning.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr("verifier_svc.backends.pass_timing.time.perf_counter", lambda: clock[0])
    layout = CpuBackend(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    target = _OneDnnTarget(layout, cost, clock)
    rows = cpu_tuning.onednn_rows_from(target, layout, _Cache(), context_tokens=8)  # type: ignore[arg-type]
    assert layout.onednn_min_rows == rows and target.calls == 2 * turns * len(cpu_tuning.ONEDNN_ROWS)
    return rows


def test_onednn_copies_are_read_from_the_fewest_rows_that_pay(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From the smallest timed size from which every larger one ran faster with the copies, and
    all of them together by MIN_GAIN; else not at all."""
    amd = {False: {2: 0.040, 4: 0.041, 8: 0.048, 16: 0.059}, True: {2: 0.046, 4: 0.036, 8: 0.040, 16: 0.045}}  # ~2026-11-29
    assert _onednn_rows(lambda call, size, on: amd[on][size], monkeypatch) == 4
    assert _onednn_rows(lambda call, size, on: 0.03 if on else 0.04, monkeypatch) == 2
    assert _onednn_rows(lambda call, size, on: 0.05 if on else 0.04, monkeypatch) == 0
    assert _onednn_rows(lambda call, size, on: 0.0399 if on else 0.04, monkeypatch) == 0  # within MIN_GAIN
    assert _onednn_rows(lambda call, size, on: 0.03 if on and size != 16 else 0.04, monkeypatch) == 0  # slower at 16 rows


def test_a_burst_on_the_passes_without_them_does_not_keep_onednn_copies(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every pass without them but one turn's hit by a neighbour: minima compare, so that clean
    turn decides, and the copies (no faster) go."""
    sizes = len(cpu_tuning.ONEDNN_ROWS)  # the second turn runs the passes without them first
    assert _onednn_rows(lambda call, size, on: 0.040 if on or 2 * sizes < call <= 3 * sizes else 0.3, monkeypatch) == 0


def test_the_onednn_timing_starts_no_turn_past_its_budget(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A start beside a busy neighbour (every pass 2 s): one turn (16 s), then the choice from it."""
    assert _onednn_rows(lambda call, size, on: 1.9 if on else 2.0, monkeypatch, turns=1) == 2


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, attn_implementation=GROUPED_SDPA,
    )
    return LlamaForCausalLM(config).eval()


def _copies(model: torch.nn.Module) -> list[torch.Tensor | None]:
    return [m.one_row_weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def test_the_cpu_backend_makes_one_row_copies_where_dtype_and_memory_allow(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    model = _tiny_llama()
    assert CpuBackend(model).one_row and all(copy is not None and copy.shape[0] == 2 for copy in _copies(model))
    assert not CpuBackend(model, one_row=False).one_row and _copies(model) == [None] * len(_copies(model))
    monkeypatch.setattr("verifier_svc.backends.cpu.available_memory_bytes", lambda: 1 << 10)  # 1 KiB left: too little
    assert not CpuBackend(model).one_row and set(_copies(model)) == {None}
    monkeypatch.setattr("verifier_svc.backends.cpu.available_memory_bytes", lambda: None)  # unknown: none made
    assert not CpuBackend(model).one_row
    monkeypatch.setattr("verifier_svc.backends.cpu.available_memory_bytes", lambda: 1 << 40)
    assert not CpuBackend(model.to(torch.bfloat16)).one_row and set(_copies(model)) == {None}  # bfloat16 gains nothing


def test_the_cpu_backend_makes_float32_copies_of_narrow_weights_where_memory_allows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = _tiny_llama()
    float32_weights = lambda: [m.float32_weight for m in model.modules() if isinstance(m, torch.nn.Linear)]  # noqa: E731
    assert not CpuBackend(model).float32_rows and set(float32_weights()) == {None}  # float32 weights need none
    model.to(torch.bfloat16)
    backend = CpuBackend(model)
    assert backend.float32_rows and all(w is not None and w.dtype == torch.float32 for w in float32_weights())
    with backend.kernels():
        assert backend.linear_switch.float32_rows
    assert not CpuBackend(model, float32_rows=False).float32_rows and set(float32_weights()) == {None}
    monkeypatch.setattr("verifier_svc.backends.cpu.available_memory_bytes", lambda: 1 << 10)
    assert not CpuBackend(model).float32_rows and set(float32_weights()) == {None}


def test_tuning_frees_float32_copies_it_does_not_keep(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from verifier_svc.target_model import TargetModel

    model = _tiny_llama().to(torch.bfloat16)
    target = TargetModel(model, "tiny")
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.float32_rows
    monkeypatch.setattr("verifier_svc.backends.cpu.keep_copies", lambda target, layout, copies, *args: copies != "float32_rows")
    monkeypatch.setattr("verifier_svc.backends.cpu.tune_pass_sizes", lambda *args, **kwargs: [0.01])
    backend.tune(target, context_tokens=8, max_tokens=4, repeats=1)
    assert not backend.float32_rows
    assert {m.float32_weight for m in model.modules() if isinstance(m, torch.nn.Linear)} == {None}


@pytest.mark.parametrize("decision", ["copies slower", "F.linear chosen"])
def test_tuning_frees_one_row_copies_it_does_not_keep(decision: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from verifier_svc.target_model import TargetModel

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    model = _tiny_llama()
    target = TargetModel(model, "tiny")
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.one_row
    monkeypatch.setattr("verifier_svc.backends.cpu.keep_copies", lambda *args: decision != "copies slower")

    def tune_pass_sizes(target, layout, *args, **kwargs):  # type: ignore[no-untyped-def]
        layout.weight_first = decision != "F.linear chosen"
        return [0.01]

    monkeypatch.setattr("verifier_svc.backends.cpu.tune_pass_sizes", tune_pass_sizes)
    backend.tune(target, context_tokens=8, max_tokens=4, repeats=1)
    assert not backend.one_row and set(_copies(model)) == {None}


def test_each_backend_says_what_runs_its_passes() -> None:
    """engine(): ModelInfo.engine, what a report shows of the passes that ran (the CUDA backend's
    words without graphs are checked here on CPU; with graphs, in test_cuda.py's runs)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, vocab_size=64))
    assert GenericBackend(model).engine() == f"generic: torch, {model.config._attn_implementation} attention"
    assert CudaBackend(model, graphs=False).engine().startswith("cuda: torch, ") and CudaBackend(model, graphs=False).engine().endswith("; no CUDA graphs")
    cpu = CpuBackend(model, one_row=False)
    assert cpu.engine() == f"cpu: torch, {model.config._attn_implementation} attention, float32; every pass in torch; torch's linear layers weight first"
    cpu.weight_first, cpu.onnx_off = False, "onnxruntime not installed"
    assert cpu.engine().endswith("; every pass in torch (onnxruntime's passes off: onnxruntime not installed); torch's linear layers F.linear, padded to 4 rows")


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("rows", [0, 4])
def test_tuning_keeps_onednn_copies_only_where_they_pay(rows: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from verifier_svc.target_model import TargetModel

    model = _tiny_llama()
    target = TargetModel(model, "tiny")
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.onednn_min_rows == 0  # made and judged by tuning
    seen: list[bool] = []

    def onednn_rows_from(target, layout, *args, **kwargs):  # type: ignore[no-untyped-def]
        assert kwargs["judged"] == cpu_tuning.ONEDNN_ROWS  # float32: from 2 rows
        seen.append(all(m.onednn_weight is not None for m in model.modules() if isinstance(m, torch.nn.Linear)))
        layout.onednn_min_rows = rows
        return rows

    monkeypatch.setattr("verifier_svc.backends.cpu.onednn_rows_from", onednn_rows_from)
    monkeypatch.setattr("verifier_svc.backends.cpu.tune_pass_sizes", lambda *args, **kwargs: [0.01])
    backend.tune(target, context_tokens=8, max_tokens=4, repeats=1)
    copies = [m.onednn_weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert seen == [True] and (set(copies) == {None} if rows == 0 else None not in copies)
    assert ("oneDNN weight copies from 4 rows" in backend.engine()) is (rows == 4)
    with backend.kernels():
        assert backend.linear_switch.onednn_min_rows == rows
    monkeypatch.setattr("verifier_svc.backends.cpu.available_memory_bytes", lambda: 1 << 10)  # too little memory: none made
    seen.clear()
    backend.tune(target, context_tokens=8, max_tokens=4, repeats=1)
    assert seen == [] and backend.onednn_min_rows == 0


@pytest.mark.skipif(not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no oneDNN bfloat16 kernels")
@pytest.mark.parametrize("rows", [1, 8])
def test_bfloat16_tuning_judges_one_token_passes_and_frees_the_float32_copies_the_onednn_ones_replace(rows: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """In bfloat16 the oneDNN copies are judged from one-token passes on; read from 4 rows or
    fewer they take every product the float32 copies would, which are then freed."""
    from verifier_svc.target_model import TargetModel

    model = _tiny_llama().to(torch.bfloat16)
    target = TargetModel(model, "tiny")
    backend = target.backend
    assert isinstance(backend, CpuBackend) and backend.float32_rows
    judged: list[tuple[int, ...]] = []

    def onednn_rows_from(target, layout, *args, **kwargs):  # type: ignore[no-untyped-def]
        judged.append(tuple(kwargs["judged"]))
        layout.onednn_min_rows = rows
        return rows

    monkeypatch.setattr("verifier_svc.backends.cpu.keep_copies", lambda *args: True)
    monkeypatch.setattr("verifier_svc.backends.cpu.onednn_rows_from", onednn_rows_from)
    monkeypatch.setattr("verifier_svc.backends.cpu.tune_pass_sizes", lambda *args, **kwargs: [0.01])
    backend.tune(target, context_tokens=8, max_tokens=4, repeats=1)
    assert judged == [cpu_tuning.BFLOAT16_ONEDNN_ROWS] and cpu_tuning.BFLOAT16_ONEDNN_ROWS[0] == 1
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert None not in [m.onednn_weight for m in linear]
    assert backend.float32_rows is (rows > 4) and ({m.float32_weight is None for m in linear} == {rows <= 4})

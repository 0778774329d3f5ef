"""Pass sizes and linear layouts on CPU, timed at start so that a noisy neighbour cannot lock in
a bad choice.

First the weight copies (linear_layout.py): the one-row copies by one-token passes with and
without them, the float32 copies (of bfloat16 weights) by passes of FLOAT32_ROWS_TOKENS tokens,
in turns, COPY_TURNS each; copies are kept only if their minimum beats the other's by
batch_planner.MIN_GAIN. Then the pass sizes: the verifier times lone passes of 1..K tokens in
both linear layouts (linear_layout.py), keeps the layout whose passes, each padded to the
fastest size at or above it (batch_planner.py), cost less summed over the sizes, and pads so
from then on. A start beside a process that loads both cores once timed 2-12-token passes at
~3 s each and padded every one of them to 12 tokens for the life of the process. So:

- every size is timed `repeats` times, sizes and layouts interleaved, and its minimum kept;
- the sweeps stop at TUNING_BUDGET_SECONDS: only complete sweeps count, and when not even
  one completes in that time nothing is padded (weight first, every pass at its own size);
- each padding choice (r real tokens run as s) is confirmed by CONFIRM_TURNS back-to-back pairs
  of passes of r and of s tokens, which a burst of contention hits alike: it is kept only if s's
  minimum is below r's own minimum by batch_planner.MIN_GAIN, so padding never makes a pass slower
  than it was measured to run unpadded.

Where onnxruntime runs the lone passes (onnx_passes.py), torch runs the batched ones: its layout
is then judged by torch passes of BATCHED_ROWS tokens, both layouts in turns, minima compared
(`tune_batched_layout`), and the lone passes are only timed.

oneDNN weight copies (linear_layout.py) are judged by torch passes of ONEDNN_ROWS tokens
(BFLOAT16_ONEDNN_ROWS for a bfloat16 target) with and without them, in turns started within
ONEDNN_BUDGET_SECONDS (`onednn_rows_from`): they are read from the fewest of those rows from
which every larger size ran faster with them, and together faster by MIN_GAIN.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from verifier_svc.backends.pass_timing import lone_pass_seconds
from verifier_svc.batch_planner import MIN_GAIN, fastest_at_least

if TYPE_CHECKING:
    from verifier_svc.kv_cache import KVCache
    from verifier_svc.target_model import TargetModel

# At most this long on timing sweeps (a quiet 2-core host sweeps 16 sizes x 2 layouts x 3
# repeats in ~10 s; the confirmation pairs after them take a few seconds more).
TUNING_BUDGET_SECONDS = 60.0
CONFIRM_TURNS = 3
COPY_TURNS = 5
# The pass the float32 copies are judged by: a speculative round's size.
FLOAT32_ROWS_TOKENS = 8
# Where onnxruntime runs the lone passes, torch's are batched passes of a few sessions' rounds:
# torch's layout is judged by passes of these many rows, and F.linear's padding of a 2-row pass.
BATCHED_ROWS = (2, 4, 8)
# The oneDNN copies are judged by passes of these many rows (a batched pass of 2-16 sessions'
# rounds), in turns that start within ONEDNN_BUDGET_SECONDS: a quiet 2-core host runs all five
# in ~4 s, but a restart beside a serving verifier took 24 s.
ONEDNN_ROWS = (2, 4, 8, 16)
# In bfloat16 a one-token pass is judged too: bfloat16 F.linear reads a weight at ~8 GB/s here,
# its oneDNN copy at ~13 (docs/design/onednn-copies.md), where float32 one-token passes have
# one-row copies or onnxruntime.
BFLOAT16_ONEDNN_ROWS = (1, *ONEDNN_ROWS)
ONEDNN_BUDGET_SECONDS = 10.0


class LayoutChoice(Protocol):
    weight_first: bool
    one_row: bool
    float32_rows: bool
    onednn_min_rows: int


def keep_copies(
    target: TargetModel, layout: LayoutChoice, copies: str, cache: KVCache, context_tokens: int, turns: int = COPY_TURNS
) -> bool:
    """Whether lone passes on `cache` (context_tokens cached tokens, pass_timing.prefilled_cache)
    run faster, weight first, with the copies `copies` names ("one_row": one-token passes;
    "float32_rows": FLOAT32_ROWS_TOKENS tokens) than without (module docstring); leaves that
    attribute of `layout` so."""
    tokens = 1 if copies == "one_row" else FLOAT32_ROWS_TOKENS
    layout.weight_first = True
    best = minima_in_turns(target, cache, context_tokens, lambda choice: setattr(layout, copies, choice), (tokens,), turns)
    kept = best[True][tokens] < (1 - MIN_GAIN) * best[False][tokens]
    setattr(layout, copies, kept)
    return kept


def minima_in_turns(
    target: TargetModel, cache: KVCache, context_tokens: int, choose: Callable[[bool], None], sizes: Sequence[int], turns: int,
    budget_seconds: float = float("inf"),
) -> dict[bool, dict[int, float]]:
    """Per choice (True, False: made by `choose`) and per size, the minimum seconds of lone passes
    of that many tokens on `cache` over `turns` turns, the two choices in alternating order, so
    that a burst of contention hits both alike and the minima compare clean passes; no turn
    starts after `budget_seconds` (the first always runs)."""
    best = {choice: dict.fromkeys(sizes, float("inf")) for choice in (True, False)}
    started = time.perf_counter()
    for turn in range(turns):
        if turn and time.perf_counter() - started > budget_seconds:
            break
        for choice in (True, False) if turn % 2 == 0 else (False, True):
            choose(choice)
            for size in sizes:
                best[choice][size] = min(best[choice][size], lone_pass_seconds(target, cache, context_tokens, size))
    return best


def tune_pass_sizes(
    target: TargetModel, layout: LayoutChoice, cache: KVCache, context_tokens: int, max_tokens: int, repeats: int,
    budget_seconds: float = TUNING_BUDGET_SECONDS, layouts: Sequence[bool] = (True, False),
) -> list[float]:
    """Set layout.weight_first and target.pass_tokens / pass_seconds / pass_context_tokens from
    timed lone passes on `cache` (context_tokens cached tokens) (module docstring), in `layouts`
    (weight first or not; only one where the model has no layer it switches). Returns the
    kept layout's unpadded seconds for 1..max_tokens tokens (empty when no sweep completed)."""
    target.pass_tokens = []  # time the sizes themselves, unpadded
    best = {choice: [float("inf")] * max_tokens for choice in layouts}

    def timed(choice: bool, size: int) -> float:
        layout.weight_first = choice
        seconds = lone_pass_seconds(target, cache, context_tokens, size)
        best[choice][size - 1] = min(best[choice][size - 1], seconds)
        return seconds

    started, sweeps = time.perf_counter(), 0
    while sweeps < repeats and (sweeps == 0 or time.perf_counter() - started < budget_seconds):
        for size in range(1, max_tokens + 1):
            for choice in layouts:
                timed(choice, size)
            if time.perf_counter() - started > budget_seconds and sweeps == 0:
                layout.weight_first, target.pass_tokens, target.pass_seconds = True, [1], []
                return []
        sweeps += 1
    padded_cost = {choice: sum(best[choice][s - 1] for s in fastest_at_least(best[choice])) for choice in layouts}
    layout.weight_first = min(layouts, key=lambda choice: padded_cost[choice])
    seconds = best[layout.weight_first]
    sizes = fastest_at_least(seconds)
    for real, size in enumerate(sizes, start=1):
        if size != real:
            for _ in range(CONFIRM_TURNS):
                timed(layout.weight_first, real)
                timed(layout.weight_first, size)
    sizes = [s if s == r or seconds[s - 1] < (1 - MIN_GAIN) * seconds[r - 1] else r for r, s in enumerate(sizes, start=1)]
    target.pass_tokens = sizes
    target.pass_seconds = [seconds[s - 1] for s in sizes]
    target.pass_context_tokens = context_tokens
    return seconds


def tune_batched_layout(target: TargetModel, layout: LayoutChoice, cache: KVCache, context_tokens: int, padded_rows: int,
                        turns: int = COPY_TURNS) -> int:
    """Where another engine runs the lone passes and torch the batched ones: set
    layout.weight_first from torch passes of BATCHED_ROWS tokens on `cache` (target.score must
    run them in torch), both layouts in turns, `turns` each, F.linear kept only if its minima sum
    below weight first's by MIN_GAIN. Returns the rows a pass through F.linear is padded to:
    `padded_rows` where a pass of that many tokens ran faster than one of 2 by MIN_GAIN, else 1
    (weight first: 1)."""
    best = minima_in_turns(target, cache, context_tokens, lambda choice: setattr(layout, "weight_first", choice),
                           sorted({*BATCHED_ROWS, padded_rows}), turns)
    linear = sum(best[False][size] for size in BATCHED_ROWS)
    layout.weight_first = not linear < (1 - MIN_GAIN) * sum(best[True][size] for size in BATCHED_ROWS)
    if layout.weight_first:
        return 1
    return padded_rows if best[False][padded_rows] < (1 - MIN_GAIN) * best[False][2] else 1


def onednn_rows_from(
    target: TargetModel, layout: LayoutChoice, cache: KVCache, context_tokens: int, turns: int = COPY_TURNS,
    budget_seconds: float = ONEDNN_BUDGET_SECONDS, judged: Sequence[int] = ONEDNN_ROWS,
) -> int:
    """The fewest rows from which passes read the oneDNN copies (0: none), from torch passes of
    `judged` tokens (increasing) on `cache` with and without them, in turns, up to `turns` each
    within `budget_seconds` (module docstring); leaves layout.onednn_min_rows so."""
    best = minima_in_turns(target, cache, context_tokens, lambda choice: setattr(layout, "onednn_min_rows", judged[0] if choice else 0),
                           judged, turns, budget_seconds)
    layout.onednn_min_rows = 0
    for i, rows in enumerate(judged):
        sizes = judged[i:]
        if all(best[True][s] < best[False][s] for s in sizes) and sum(best[True][s] for s in sizes) < (1 - MIN_GAIN) * sum(best[False][s] for s in sizes):
            layout.onednn_min_rows = rows
            break
    return layout.onednn_min_rows

"""batched_pass_timing: the batched passes timed at start, from which the round price's shared
curve starts, on a tiny random-weight Llama: their shapes, the caches left as they were, the
verifier's price seeded from them (not from the lone passes), and a busy start's slow passes
kept out of them."""

from __future__ import annotations

import time

import pytest

import verifier_svc.batched_pass_timing as timing
from tests.verifier_svc.test_batched_pass_copies import tiny_target
from verifier_svc.backends.pass_timing import PRICE_CONTEXT_TOKENS
from verifier_svc.batched_pass_timing import SEED_SHAPES, time_batched_passes
from verifier_svc.pass_price import PassPriceModel


def test_batched_passes_are_timed_at_their_packed_rows_and_seed_the_shared_curve() -> None:
    target = tiny_target()
    timed = time_batched_passes(target, repeats=1)
    assert [(rows, slots) for rows, slots, _ in timed] == [(b * n, b * PRICE_CONTEXT_TOKENS) for b, n in SEED_SHAPES]
    assert all(seconds > 0 for _, _, seconds in timed)
    model = PassPriceModel()
    model.seed([0.01, 0.011, 0.012], PRICE_CONTEXT_TOKENS, timed)
    assert model.shared_seeded
    model.seed([0.01, 0.011, 0.012], PRICE_CONTEXT_TOKENS, [(0, 0, 0.01), (4, 256, 0.0)])  # nothing valid: the lone line stands in
    assert not model.shared_seeded


def test_a_slow_first_pass_and_a_shape_slow_in_every_sweep_do_not_seed_the_price(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pass (a first call's set-up) is not timed, and a shape that a burst of contention
    hit in every sweep is priced no higher than a larger shape; sweeps after the first stop at
    the budget."""
    target, calls = tiny_target(), []
    real = timing.score_batch

    def contended(target, inputs):  # type: ignore[no-untyped-def]
        calls.append(len(inputs))
        if len(calls) == 1:
            time.sleep(0.5)  # the first pass
        elif len(inputs) == 2 and len(inputs[0].tree) == 0:
            time.sleep(0.1)  # the smallest shape, every time
        return real(target, inputs)

    monkeypatch.setattr(timing, "score_batch", contended)
    timed = time_batched_passes(target, repeats=3)
    assert len(calls) == 1 + 3 * len(SEED_SHAPES)
    seconds = [t for _, _, t in timed]
    assert seconds[0] <= seconds[1] < 0.1
    assert seconds == sorted(seconds)
    calls.clear()
    time_batched_passes(target, repeats=3, budget_seconds=0.0)
    assert len(calls) == 1 + len(SEED_SHAPES)  # the first sweep only

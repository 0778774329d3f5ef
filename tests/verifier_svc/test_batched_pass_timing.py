"""batched_pass_timing: the batched passes timed at start, from which the round price's shared
curve starts, on a tiny random-weight Llama: their shapes, the caches left as they were, and the
verifier's price seeded from them (not from the lone passes)."""

from __future__ import annotations

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

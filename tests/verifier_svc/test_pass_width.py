"""pass_width: which width of a batched pass pays, from the pass-time fit and each round's
expected accepted tokens."""

from __future__ import annotations

import numpy as np
import pytest

from verifier_svc.pass_width import AcceptanceRate, node_gains, pass_width, primary_labels


def rate(pending: list[int], gains: list[list[float]], plain: float, row: float, width: int) -> float:
    """Expected tokens per second of the pass at `width` (the objective, written out)."""
    base = max(pending)
    tokens = len(pending) + sum(sum(g[: max(0, width - p)]) for p, g in zip(pending, gains))
    return tokens / (plain + row * len(pending) * (width - base))


def test_node_gains_are_the_probability_of_ending_on_the_accepted_path() -> None:
    # a chain: alpha^depth
    assert node_gains([-1, 0, 1], 0.5) == pytest.approx([0.5, 0.25, 0.125])
    # two roots: the second is tried only after the first is rejected; a child inherits its parent's
    assert node_gains([-1, -1, 1], 0.8) == pytest.approx([0.8, 0.2 * 0.8, 0.2 * 0.8 * 0.8])
    # an invalid parent (prepare() refuses the round later) gains nothing and raises nothing
    assert node_gains([-1, 5, -7], 0.5) == pytest.approx([0.5, 0.0, 0.0])


def test_the_chosen_width_is_the_best_rate_and_never_below_the_plain_pass() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        b = int(rng.integers(2, 33))
        pending = [int(rng.choice([1, 1, 1, 40])) for _ in range(b)]
        gains = [node_gains([-1, *range(int(rng.integers(0, 9)) - 1)][: int(rng.integers(0, 9))], float(rng.uniform(0, 1))) for _ in range(b)]
        plain, row = float(rng.uniform(0.03, 0.3)), float(rng.uniform(1e-4, 0.01))
        width = pass_width(pending, gains, plain, row)
        widest = max(p + len(g) for p, g in zip(pending, gains))
        rates = {w: rate(pending, gains, plain, row, w) for w in range(max(pending), widest + 1)}
        assert rates[width] == pytest.approx(max(rates.values()))
        assert rates[width] >= b / plain * (1 - 1e-9)


def test_costly_rows_cut_every_draft_cheap_rows_keep_them_and_a_prefill_makes_its_width_free() -> None:
    chain = node_gains([-1, 0, 1, 2], 0.9)
    # 8 decode rounds, a row costing as much as a plain round's share: nothing pays
    assert pass_width([1] * 8, [chain] * 8, plain_seconds=0.1, row_seconds=0.1 / 8) == 1
    # the same rounds with nearly free rows: every node
    assert pass_width([1] * 8, [chain] * 8, plain_seconds=0.1, row_seconds=1e-6) == 5
    # a prefill of 40 tokens in the pass: the decode rounds' nodes ride along at no cost
    assert pass_width([40] + [1] * 7, [[]] + [chain] * 7, plain_seconds=0.5, row_seconds=0.1) == 40
    # at low acceptance even moderately cheap rows do not pay
    assert pass_width([1] * 4, [node_gains([-1, 0], 0.05)] * 4, plain_seconds=0.08, row_seconds=0.002) == 1


def test_primary_labels_follow_the_first_child_at_every_level_as_far_as_it_was_reached() -> None:
    # 0 root; 1 second root; 2 child of 0; 3 child of 1; 4 second child of 0; 5 child of 2
    tree, probs = [-1, -1, 0, 1, 0, 2], [1.0, 0.5, 0.9, 0.3, 0.2, 0.7]
    assert primary_labels(tree, probs, accepted={0, 2, 5}) == [1.0, 0.9, 0.7]
    # node 2 rejected: node 5, scored after it, is not a label
    assert primary_labels(tree, probs, accepted={0, 4}) == [1.0, 0.9]
    # the first node rejected: one label, whatever the later nodes scored
    assert primary_labels([-1, 0, 1, 2], [0.0, 1.0, 1.0, 1.0], accepted=set()) == [0.0]
    assert primary_labels([-1, 0, 1], [1.0], accepted={0}) == [1.0]  # a verdict over a cut tree has fewer labels


def test_acceptance_rate_moves_towards_its_labels() -> None:
    a = AcceptanceRate(alpha=0.5, rate=0.2)
    a.update([0.0, 0.0])
    assert a.alpha == pytest.approx(0.5 * 0.8 * 0.8)
    a.update([1.0] * 50)
    assert a.alpha > 0.99

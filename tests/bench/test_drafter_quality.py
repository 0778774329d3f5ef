"""Leviathan et al.'s predicted speedup, and alpha/q bytes at one position, as bench-drafter computes them."""

from __future__ import annotations

import numpy as np
import pytest

from bench.drafter_quality import alpha_at, predicted_speedup
from specdec.sampling_params import SamplingParams


def test_predicted_speedup_follows_leviathan() -> None:
    assert predicted_speedup(0.8, 0.1, 0) == pytest.approx(1.0)  # no drafts: one token per pass
    assert predicted_speedup(0.0, 0.5, 4) == pytest.approx(1 / 3)  # nothing accepted: pure drafting cost
    assert predicted_speedup(1.0, 0.0, 4) == pytest.approx(5.0)  # free, perfect drafts: g + 1 tokens per pass
    # Their example (section 3.5): alpha 0.8, c 0.05, gamma 5 -> ~3.1x
    assert predicted_speedup(0.8, 0.05, 5) == pytest.approx((1 - 0.8**6) / (0.2 * 1.25))
    assert predicted_speedup(0.99999999, 0.2, 3) == pytest.approx(predicted_speedup(1.0, 0.2, 3), rel=1e-6)


def test_alpha_is_the_overlap_of_p_and_the_q_sent() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.2], np.float32))
    same, size = alpha_at(logits, logits, SamplingParams(1.0))
    assert same == pytest.approx(1.0, abs=1e-6) and size > 0
    other = np.log(np.array([0.2, 0.3, 0.5], np.float32))
    assert alpha_at(logits, other, SamplingParams(1.0))[0] == pytest.approx(0.2 + 0.3 + 0.2, abs=1e-6)
    assert alpha_at(logits, other, SamplingParams(0.0))[0] == 0.0  # argmaxes differ
    assert alpha_at(logits, logits, SamplingParams(0.0))[0] == 1.0

"""round_gather: how long a pass waits for the sessions whose drafters are turning around."""

from __future__ import annotations

import pytest

from verifier_svc.round_gather import JITTER, PRIOR_TURNAROUND, Turnarounds, cohort_deadline


class Key:  # a session stand-in (weak-referenceable)
    pass


def test_each_session_has_its_own_running_turnaround_and_a_new_one_the_overall() -> None:
    turnarounds: Turnarounds[Key] = Turnarounds(decay=0.5)
    fast, slow, new = Key(), Key(), Key()
    assert turnarounds.expected(new) == PRIOR_TURNAROUND
    turnarounds.observe(fast, 0.002)
    turnarounds.observe(slow, 0.030)
    turnarounds.observe(slow, 0.050)
    assert turnarounds.expected(fast) == pytest.approx(0.002)
    assert turnarounds.expected(slow) == pytest.approx(0.040)  # 0.5 x 30 ms + 0.5 x 50 ms
    assert 0.002 < turnarounds.expected(new) < 0.050  # the mean of all turnarounds seen


def test_waits_for_the_latest_expected_return_below_the_limit_and_never_past_it() -> None:
    slack = 0.003
    # due: verdict time + 1.5 x turnaround + slack
    assert cohort_deadline([(10.0, 0.004), (10.1, 0.002)], limit=0.045, slack=slack) == pytest.approx(10.1 + JITTER * 0.002 + slack)
    # a drafter slower than a pass's fixed cost is not waited for
    assert cohort_deadline([(10.0, 0.080)], limit=0.045, slack=slack) is None
    assert cohort_deadline([], limit=0.045, slack=slack) is None
    # a turnaround just below the limit waits no longer than the limit
    assert cohort_deadline([(10.0, 0.040)], limit=0.045, slack=slack) == pytest.approx(10.045)

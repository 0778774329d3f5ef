"""The batch planner: pass sizes, which rounds share a pass, how long a pass waits for sessions
turning around, and the hard limit on a batched pass's rows."""

from __future__ import annotations

import pytest

from verifier_svc.batch_planner import (
    JITTER,
    PRIOR_TURNAROUND,
    BatchPlanner,
    Turnarounds,
    cohort_deadline,
    fastest_at_least,
    kept_nodes,
    pack,
)
from verifier_svc.session import RoundInput


def test_each_size_goes_to_the_fastest_size_at_or_above_it() -> None:
    # 1 token 40 ms; 2-3 slow (padded to 4); 7 slower than 8; nothing above 8 beats its own size
    seconds = [0.040, 0.064, 0.064, 0.058, 0.058, 0.062, 0.076, 0.064, 0.072]
    assert fastest_at_least(seconds) == [1, 4, 4, 4, 5, 6, 8, 8, 9]


def test_plain_decoding_is_never_padded_and_noise_is_not_followed() -> None:
    assert fastest_at_least([0.050, 0.045, 0.060])[0] == 1  # even if 2 tokens looked faster
    assert fastest_at_least([0.040, 0.060, 0.0595]) == [1, 2, 3]  # 1% is noise, not a gain
    assert fastest_at_least([]) == []


def test_decode_rounds_share_a_pass_whatever_their_drafts() -> None:
    assert pack([1, 3, 1, 9, 2], max_tokens=512) == [0, 1, 2, 3, 4]


def test_a_prefill_shares_a_pass_with_decode_rounds_within_the_budget() -> None:
    # A packed pass pads nothing: a prompt's rows cost the decode rounds beside it no rows.
    assert pack([1, 2, 200, 1], max_tokens=512) == [0, 1, 2, 3]
    assert pack([200, 1, 2], max_tokens=512) == [0, 1, 2]
    # Rows beyond the budget wait for the next pass; later rounds that fit still join.
    assert pack([100, 90, 110, 400, 5], max_tokens=512) == [0, 1, 2, 4]
    assert pack([100, 90, 110], max_tokens=250) == [0, 1]


def test_the_first_round_always_runs_and_nothing_waiting_is_nothing() -> None:
    assert pack([600, 1], max_tokens=512) == [0]
    assert pack([], max_tokens=512) == []


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


def test_only_the_hard_row_limit_cuts_nodes_and_never_a_lone_round() -> None:
    assert kept_nodes([8, 8, 3], [1, 1, 1], 0) == [8, 8, 3]  # no limit: the drafters priced their nodes
    assert kept_nodes([30], [1], 12) == [30]  # a lone round keeps all of its nodes
    assert kept_nodes([8, 8, 3], [1, 1, 1], 24) == [7, 7, 3]  # 24 rows // 3 rounds - 1 pending
    assert kept_nodes([8, 8], [1, 20], 24) == [8, 0]  # a prefill keeps none past the limit


class _Session:
    """What the planner reads of a session: its tokens, how many are cached, whether it ended."""

    def __init__(self, tokens: int, cached: int) -> None:
        self.tokens, self.cached, self.closed = [0] * tokens, cached, False

    def cached_tokens(self) -> int:
        return self.cached


def test_the_planner_packs_by_pending_tokens_and_waits_for_quick_turnarounds() -> None:
    planner = BatchPlanner(max_batch_tokens=512, max_wait_s=0.003, max_pass_rows=0)
    decode, prefill = _Session(101, 100), _Session(300, 0)
    chain = RoundInput.point_masses([5, 6, 7], [-1, 0, 1])
    waiting = [(decode, chain), (prefill, RoundInput.point_masses([], [])), (_Session(51, 50), chain)]
    assert planner.choose(waiting) == [0, 1, 2]  # type: ignore[arg-type]  # 4 + 300 + 4 rows
    assert BatchPlanner(max_batch_tokens=256).choose(waiting) == [0, 2]  # type: ignore[arg-type]  # the prefill waits
    assert planner.wait_until(10.0, fixed_seconds=0.05) == pytest.approx(10.003)
    planner.answered([decode], 10.0)  # type: ignore[list-item]
    planner.arrived(decode, 10.002)  # type: ignore[arg-type]
    planner.answered([decode], 11.0)  # type: ignore[list-item]
    expected = planner.turnarounds.expected(decode)
    assert planner.wait_until(11.0, fixed_seconds=0.05) == pytest.approx(11.0 + JITTER * expected + 0.003)
    assert planner.wait_until(11.0, fixed_seconds=expected / 2) == pytest.approx(11.003)  # too slow to wait for
